//go:build !(amd64 || arm64) || !gc || purego

package webhook

// prefetch does nothing here: it is an instruction of amd64 and arm64,
// written in Go's assembly (prefetch_asm.go), and only ever a hint.
func prefetch(uintptr) {}
