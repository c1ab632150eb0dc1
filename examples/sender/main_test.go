package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestHelpHidesTheSecret runs the program with -h and WEBHOOK_SECRET set:
// the usage text must not show it.
func TestHelpHidesTheSecret(t *testing.T) {
	if os.Getenv("SENDER_EXAMPLE_RUN_MAIN") == "1" {
		os.Args = []string{"sender", "-h"}
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelpHidesTheSecret$")
	cmd.Env = append(os.Environ(), "SENDER_EXAMPLE_RUN_MAIN=1", "WEBHOOK_SECRET=whsec_do_not_print")
	out, _ := cmd.CombinedOutput() // -h exits 2
	if !strings.Contains(string(out), "-secret") {
		t.Fatalf("the usage text was not printed:\n%s", out)
	}
	if strings.Contains(string(out), "whsec_do_not_print") {
		t.Errorf("-h shows the secret:\n%s", out)
	}
}
