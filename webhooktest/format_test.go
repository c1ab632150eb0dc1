package webhooktest_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/signedhook/webhook/webhooktest"
	"github.com/stretchr/testify/assert"
)

// TestServer_NoFmtVerbShowsTheSecret: a test that logs its Server
// (t.Logf("%+v", srv), slog.Any) must not print the signing secret in CI
// output, as no fmt verb shows a Connection's.
func TestServer_NoFmtVerbShowsTheSecret(t *testing.T) {
	const secret = "whsec_do_not_print_me"
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		assert.NotContains(t, fmt.Sprintf(verb, srv), secret, verb)
		assert.NotContains(t, fmt.Sprintf(verb, []any{srv}), secret, verb+" in a slice")
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("server", "srv", srv)
	assert.NotContains(t, b.String(), secret, "slog")
}
