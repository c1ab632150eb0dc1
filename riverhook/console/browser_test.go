package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromium returns the path of Debian's chromium. Without it the test is
// skipped, or fails under CI, where .ci/run installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed: .ci/run installs Debian's chromium package")
	}
	t.Skip("chromium is not installed (apt-get install chromium); skipping the browser test")
	return ""
}

// TestConsole_InABrowser drives headless chromium through the console: the
// deliveries of every status are listed, a hostile receiver's script does
// not run, and a resend from the page makes a new attempt that the started
// River client delivers. With UPDATE_SCREENSHOTS=1 it writes the pages'
// screenshots into ../docs for the README.
func TestConsole_InABrowser(t *testing.T) {
	exe := chromium(t)
	f := newFixture(t, nil, true)
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", f.handler))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1200, 800))...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()
	shots := os.Getenv("UPDATE_SCREENSHOTS") != ""
	shoot := func(name string) {
		t.Helper()
		if !shots {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "console-"+name+".png"), png, 0o644))
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err)
		return s
	}
	// pwned reports whether the hostile receiver's script ran: it sets the
	// title and a global.
	pwned := func() (title, global string) {
		t.Helper()
		title, err := chromedp.Run(ctx, chromedp.Title())
		require.NoError(t, err)
		global, err = chromedp.Run(ctx, chromedp.Evaluate[string](`typeof window.pwned`))
		require.NoError(t, err)
		return title, global
	}
	job := func(d string) string { return strconv.FormatInt(f.jobs[d], 10) }

	// The list: a row per delivery, in every status, the interrupted one marked.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/console/connections/crm"),
		chromedp.WaitVisible(chromedp.CSS("table.deliveries")),
	))
	rows := text("table.deliveries tbody")
	for _, want := range []string{"delivered", "retrying", "given up", "waiting", "cancelled", "interrupted", "503 Service Unavailable"} {
		assert.Contains(t, rows, want)
	}
	title, global := pwned()
	assert.Equal(t, "Deliveries to crm", title)
	assert.Equal(t, "undefined", global)
	shoot("list")

	// The hostile receiver's answer is shown as text, and runs nothing.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/console/connections/crm/deliveries/"+job("hostile")),
		chromedp.WaitVisible(chromedp.CSS("table.attempts")),
		chromedp.Sleep(200*time.Millisecond), // an onerror would have fired
	))
	assert.Contains(t, text("table.attempts .excerpt"), `<script>document.title="pwned"`, "shown as text")
	title, global = pwned()
	assert.Equal(t, "Delivery hostile", title, "the receiver's script did not set the title")
	assert.Equal(t, "undefined", global, "nor a global")

	// An interrupted run, marked as such.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/console/connections/crm/deliveries/"+job("interrupted")),
		chromedp.WaitVisible(chromedp.CSS("tr.interrupted")),
	))
	assert.Contains(t, text("tr.interrupted"), "cost no attempt")
	shoot("interrupted")

	// A delivery that gave up, resent from its page: the new job runs.
	before := len(f.srv.Deliveries())
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/console/connections/crm/deliveries/"+job("given-up")),
		chromedp.WaitVisible(chromedp.ID("resend")),
	))
	shoot("delivery")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("resend")), chromedp.WaitVisible(chromedp.ID("done"))))
	assert.Contains(t, text("#done"), "Resent")
	status := ""
	for deadline := time.Now().Add(30 * time.Second); status != "delivered" && time.Now().Before(deadline); {
		require.NoError(t, chromedp.Do(ctx, chromedp.Sleep(100*time.Millisecond), chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("status"))))
		status = text("#status")
	}
	require.Equal(t, "delivered", status, "the resend's job ran")
	assert.Contains(t, text("table.attempts tbody"), "200 OK")
	url, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(url, srv.URL+"/console/connections/crm/deliveries/"), url)
	assert.NotContains(t, url, "/deliveries/"+job("given-up")+"?", "the new delivery's page")
	assert.Len(t, f.srv.Deliveries(), before+1, "one new attempt")
}
