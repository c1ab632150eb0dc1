package riverhook_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The documented setup leaves the client-wide JobTimeout alone: it is every
// job kind's, and a service's other jobs would be killed after the
// worker's bound. The worker's own Timeout bounds its jobs.
func TestDocs_NoClientWideJobTimeout(t *testing.T) {
	durable := mustRead(t, "README.md")
	setting := regexp.MustCompile(`\bJobTimeout:`)
	for name, text := range map[string]string{"riverhook/README.md": durable, "example_test.go": mustRead(t, "example_test.go"),
		"riverhook.go": mustRead(t, "riverhook.go"), "examples/durable/main.go": mustRead(t, "examples/durable/main.go")} {
		assert.False(t, setting.MatchString(text), "%s sets the client-wide JobTimeout", name)
		assert.True(t, strings.Contains(text, "RescueStuckJobsAfter"), "%s derives the rescue threshold", name)
	}
}

// The setup the README and the package doc give must say that every River
// client on the database that works queues (any may be the elected
// leader, whose rescuer runs the jobs of dead processes) registers the
// Worker: River's rescuer discards a stuck job of a kind its client has no
// worker for, and "a crash loses no delivery" fails in a service whose
// other River clients do other work.
func TestDocs_EveryClientRegistersTheWorker(t *testing.T) {
	durable := mustRead(t, "README.md")
	// "every client", "each River client", "all clients" ... with "leader"
	// or "rescu" nearby, in either order.
	says := regexp.MustCompile(`(?is)\b(every|each|all)\b[^.:;]{0,80}\bclients?\b[^.]{0,200}\b(registers?|worker)\b[^.]{0,300}(leader|rescu)|\bregister[^.]{0,40}\bworker\b[^.]{0,80}\b(every|each|all)\b[^.]{0,40}\bclients?\b|\bleader[^.]{0,150}(discard|no worker|without the worker)`)
	for name, text := range map[string]string{"riverhook/README.md": durable, "riverhook.go": mustRead(t, "riverhook.go")} {
		assert.True(t, says.MatchString(text), "%s does not say that every client must register the Worker, or River's leader discards crashed deliveries", name)
	}
}

func mustRead(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(b)
}
