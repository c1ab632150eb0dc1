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
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	durable := string(readme)
	start := strings.Index(durable, "## Durable deliveries")
	require.GreaterOrEqual(t, start, 0)
	durable = durable[start:]
	durable = durable[:strings.Index(durable[3:], "\n## ")+3]
	setting := regexp.MustCompile(`\bJobTimeout:`)
	for name, text := range map[string]string{"README's durable section": durable, "example_test.go": mustRead(t, "example_test.go"),
		"riverhook.go": mustRead(t, "riverhook.go"), "examples/durable/main.go": mustRead(t, "examples/durable/main.go")} {
		assert.False(t, setting.MatchString(text), "%s sets the client-wide JobTimeout", name)
		assert.True(t, strings.Contains(text, "RescueStuckJobsAfter"), "%s derives the rescue threshold", name)
	}
}

func mustRead(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(b)
}
