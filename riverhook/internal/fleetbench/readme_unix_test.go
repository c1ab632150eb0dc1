//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook/internal/testdb"
)

// tinyFlags is the size TestREADME_PipelineRuns gives the READMEs' command
// lines through flagsEnv: one scenario, one worker process, 8 deliveries.
const tinyFlags = "-run bound -n 8 -latency 50ms -k 1"

// TestREADME_PipelineRuns runs each command line of the READMEs that runs
// this program, as written, through bash, from a copy of the repository's
// root (the line starts with cd riverhook): the program at the size
// tinyFlags sets through flagsEnv, tee, and benchstat, built at the version
// internal/benchcmp's go.mod requires. It checks the line's output: the
// benchmark line in fleet.txt, and benchstat's table of it.
func TestREADME_PipelineRuns(t *testing.T) {
	db := testdb.URL(t)
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Skip("not in the repository (no go.work above riverhook): the READMEs' lines run from its root")
	}
	var lines []string
	for _, readme := range []string{"riverhook/README.md", "internal/benchcmp/README.md"} {
		found := fleetbenchLines(t, filepath.Join(root, readme))
		require.NotEmpty(t, found, "%s shows no command line running internal/fleetbench", readme)
		for _, line := range found {
			if !strings.Contains(line, "&& benchstat fleet.txt") {
				t.Errorf("%s shows %q: want the whole pipeline on one line, ending && benchstat fleet.txt, as the test runs it", readme, line)
			}
		}
		lines = append(lines, found...)
	}

	dir := repositoryCopy(t, root)
	bin := filepath.Join(dir, "bin")
	installBenchstat(t, root, dir, bin)
	for _, line := range lines {
		t.Run(line, func(t *testing.T) {
			os.Remove(filepath.Join(dir, "riverhook", "fleet.txt"))
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", line)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "TEST_DATABASE_URL="+db, flagsEnv+"="+tinyFlags, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // go run's program and its worker processes go with bash
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.WaitDelay = 10 * time.Second
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)

			fleet, err := os.ReadFile(filepath.Join(dir, "riverhook", "fleet.txt"))
			require.NoError(t, err, "tee writes riverhook/fleet.txt")
			assert.Regexp(t, `(?m)^BenchmarkFleet/bound-1\t8\t[0-9.]+ deliveries/s\t`, string(fleet), "one run of bound, 1 worker process, 8 deliveries")
			assert.Contains(t, string(fleet), "Fleet summary")
			assert.NotContains(t, string(fleet), "\n# ", "no run failed its sanity check")
			assert.Regexp(t, `│\s+deliveries/s\s+│`, stdout.String(), "benchstat's table")
			assert.Regexp(t, `(?m)^Fleet/bound-1\s+[0-9.]+ ± `, stdout.String(), "benchstat's row of the run")
		})
	}
}

// fleetbenchLines returns the command lines of a README that run
// internal/fleetbench: lines of its sh blocks, and code spans (which may
// break across lines of the file).
func fleetbenchLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var lines []string
	var text strings.Builder // the file less its code blocks, for the spans
	inSh, inBlock := false, false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```"):
			inSh, inBlock = !inBlock && strings.HasPrefix(line, "```sh"), !inBlock
		case inSh && strings.Contains(line, "internal/fleetbench"):
			lines = append(lines, strings.TrimSpace(line))
		case !inBlock:
			text.WriteString(line + " ")
		}
	}
	for _, m := range regexp.MustCompile("`([^`]*go run ./internal/fleetbench[^`]*)`").FindAllStringSubmatch(text.String(), -1) {
		lines = append(lines, strings.Join(strings.Fields(m[1]), " "))
	}
	return lines
}

// repositoryCopy returns a directory standing for the repository's root,
// whose riverhook holds links to the real one's files: the lines' tee
// writes its fleet.txt there, never over one in the tree. Its go.work uses
// the same modules as the repository's.
func repositoryCopy(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "riverhook"), 0o755))
	entries, err := os.ReadDir(filepath.Join(root, "riverhook"))
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() != "fleet.txt" {
			require.NoError(t, os.Symlink(filepath.Join(root, "riverhook", e.Name()), filepath.Join(dir, "riverhook", e.Name())))
		}
	}

	cmd := exec.Command("go", "work", "edit", "-json")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err)
	var work struct {
		Go      string
		Use     []struct{ DiskPath string }
		Replace []struct {
			Old, New struct{ Path, Version string }
		}
	}
	require.NoError(t, json.Unmarshal(out, &work))
	abs := func(p string) string {
		if filepath.Clean(p) == "riverhook" {
			return "./riverhook"
		}
		if strings.HasPrefix(p, ".") {
			return filepath.Join(root, p)
		}
		return p
	}
	var w strings.Builder
	fmt.Fprintf(&w, "go %s\n", work.Go)
	for _, u := range work.Use {
		fmt.Fprintf(&w, "use %s\n", abs(u.DiskPath))
	}
	for _, r := range work.Replace {
		fmt.Fprintf(&w, "replace %s %s => %s %s\n", r.Old.Path, r.Old.Version, abs(r.New.Path), r.New.Version)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.work"), []byte(w.String()), 0o644))
	return dir
}

// installBenchstat builds benchstat into bin, at the version of
// golang.org/x/perf that internal/benchcmp's go.mod requires (its run.sh
// runs it as a tool of that module). It skips the test only if the module
// proxy does not serve that version.
func installBenchstat(t *testing.T, root, dir, bin string) {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(root, "internal", "benchcmp", "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*golang\.org/x/perf (v\S+)`).FindSubmatch(mod)
	require.NotNil(t, m, "internal/benchcmp/go.mod requires no golang.org/x/perf")
	perf := "golang.org/x/perf@" + string(m[1])

	gocmd := func(args ...string) ([]byte, error) {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOWORK=off", "GOFLAGS=")
		return cmd.CombinedOutput()
	}
	out, err := gocmd("install", "golang.org/x/perf/cmd/benchstat@"+string(m[1]))
	if err == nil {
		return
	}
	if dl, dlErr := gocmd("mod", "download", "-json", perf); dlErr != nil {
		t.Skipf("the module proxy does not serve %s, which builds benchstat: %s\n%s", perf, dlErr, dl)
	}
	t.Fatalf("go install benchstat from %s: %v\n%s", perf, err, out)
}
