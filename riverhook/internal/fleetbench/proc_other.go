//go:build !linux

package main

import (
	"os/exec"
	"time"
)

// dieWithParent does nothing here: a worker process ends when its standard
// input does, which the parent's death closes.
func dieWithParent(*exec.Cmd) {}

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }

// machineCPU is not measured here.
func machineCPU() time.Duration { return 0 }
