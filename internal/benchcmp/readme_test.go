package benchcmp

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeCommands returns the command lines a README shows, with their
// comments cut: the lines of its sh blocks, and the code spans that start
// with "./" (a script run from the README's directory or the root).
func readmeCommands(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	seen := map[string]bool{}
	add := func(line string) {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" && !seen[line] {
			seen[line] = true
			lines = append(lines, line)
		}
	}
	inSh := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inSh = true
		case strings.HasPrefix(line, "```"):
			inSh = false
		case inSh:
			add(line)
		default:
			for _, m := range regexp.MustCompile("`(\\./[^`]+)`").FindAllStringSubmatch(line, -1) {
				add(m[1])
			}
		}
	}
	return lines
}

// TestREADME_RunSh runs run.sh as each README writes it, through bash, at
// the smallest size its knobs give (COUNT=1 BENCHTIME=1x: one iteration of
// each benchmark), and checks that it measured every implementation and
// printed benchstat's tables. The README here shows two more commands: the
// fleetbench pipeline, which riverhook's internal/fleetbench runs
// (TestREADME_PipelineRuns), and cachegrind.sh (TestCachegrindSh); any
// other command line fails this test until a test runs it.
func TestREADME_RunSh(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test on two modules' benchmarks; not with -short")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{} // command line -> the directory it runs in
	for _, readme := range []string{"README.md", filepath.Join(root, "README.md")} {
		for _, line := range readmeCommands(t, readme) {
			switch {
			case readme != "README.md" && !strings.Contains(line, "benchcmp/run.sh"):
				// the root README's other commands: cmd/webhook's and examples' tests
			case strings.Contains(line, "go run ./internal/fleetbench"):
				// riverhook's TestREADME_PipelineRuns
			case strings.Contains(line, "cachegrind.sh"):
				// TestCachegrindSh
			case strings.HasPrefix(line, "./internal/benchcmp/"):
				dirs[line] = root
			case strings.HasPrefix(line, "./"):
				dirs[line] = filepath.Dir(readme)
				if filepath.Dir(readme) == "." {
					dirs[line], _ = os.Getwd()
				}
			default:
				t.Errorf("%s shows %q, which no test runs", readme, line)
			}
		}
	}
	if len(dirs) == 0 {
		t.Fatal("the READMEs show no run.sh command line")
	}
	for line, dir := range dirs {
		t.Run(line, func(t *testing.T) {
			if !strings.Contains(line, "run.sh") {
				t.Fatalf("no test runs %q", line)
			}
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", line)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "COUNT=1", "BENCHTIME=1x", "OUT="+out)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s in %s: %v\nstdout:\n%s\nstderr:\n%s", line, dir, err, &stdout, &stderr)
			}
			for _, want := range []string{`count: 1; benchtime: 1x`, `== verification and signing`, `== the Sender's own cost`,
				`│\s+sec/op\s+│`, `│\s+floor\s+│\s+hmac-new\s+│`, `│\s+webhook\s+│`, `│\s+sender\s+│`, `\nVerify/size=256B-\d+\s+\d`} {
				if !regexp.MustCompile(want).MatchString(stdout.String()) {
					t.Errorf("%s printed nothing matching %s (benchstat's tables):\n%s", line, want, &stdout)
				}
			}
			for file, wants := range map[string][]string{
				"peers.txt":   {"BenchmarkVerify/", "/impl=floor-", "/impl=webhook-", "/impl=svix-", "/impl=stripe-", "/impl=github-", "BenchmarkSign/"},
				"library.txt": {"BenchmarkSendInMemory", "BenchmarkMiddleware", "BenchmarkDeliver/conc=32/impl=sender-", "BenchmarkNewConnections/"},
			} {
				data, err := os.ReadFile(filepath.Join(out, file))
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range wants {
					if !bytes.Contains(data, []byte(want)) {
						t.Errorf("%s: %s has no %q", line, file, want)
					}
				}
			}
		})
	}
}

// TestCachegrindSh runs cachegrind.sh, which the README shows, from the
// root on raw-bounded's deliveries, at a few iterations, and checks that
// it prints its counts. It needs valgrind, which only this diagnosis uses:
// without it, it skips.
func TestCachegrindSh(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a benchmark under valgrind; not with -short")
	}
	if _, err := exec.LookPath("valgrind"); err != nil {
		t.Skip("valgrind is not installed (Debian's package valgrind); cachegrind.sh needs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./internal/benchcmp/cachegrind.sh", "Deliver/conc=1/impl=raw-bounded$", "20", "40")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cachegrind.sh: %v\n%s", err, out)
	}
	want := regexp.MustCompile(`per iteration outside the runtime: [1-9]\d* instructions, [1-9]\d* I1 misses, [1-9]\d* D1 read misses`)
	if !want.Match(out) {
		t.Errorf("cachegrind.sh printed no counts:\n%s", out)
	}
}
