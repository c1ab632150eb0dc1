package riverhook_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// The personal data of the user whose deliveries are erased, each string
// distinctive enough that no other bytes of a dump hold it by chance, in
// any encoding.
var erasedUser = webhook.User{ID: "usr_erase_me", Email: "adelinde.quackenbosch@example.org", Name: "Adelinde Quackenbosch",
	FirstName: "Adelinde", LastName: "Quackenbosch", Phone: "+44 20 7946 0958"}

// keptUser's deliveries are not erased.
var keptUser = webhook.User{ID: "usr_keep_me", Email: "wilhelmina.oosterhuis@example.org", Name: "Wilhelmina Oosterhuis",
	FirstName: "Wilhelmina", LastName: "Oosterhuis", Phone: "+31 20 794 6123"}

func personalStrings(u webhook.User) []string {
	return []string{u.Email, u.Name, u.FirstName, u.LastName, u.Phone}
}

// userPayload is a delivery about u, whose receiver answers as scenario
// says (echoReceiver).
func userPayload(u webhook.User, deliveryID, scenario string) webhook.Payload {
	p := payload(deliveryID)
	p.User.ID, p.User.Email, p.User.Name, p.User.FirstName, p.User.LastName, p.User.Phone = u.ID, u.Email, u.Name, u.FirstName, u.LastName, u.Phone
	p.User.Metadata = webhook.Metadata{"plan": "pro", "scenario": scenario}
	return p
}

// echoReceiver answers each delivery by its payload's scenario, quoting the
// body back as receivers do, in every way they do:
//   - delivered: 200 with the body as it came;
//   - given-up: 500 with the body JSON-escaped (\u0040 for '@'), twice;
//     then, resent, 200 with the body in base64;
//   - refused: 422 whose reason phrase quotes the email, with a body that
//     quotes it and gives it, and the phone, in hex;
//   - redirected: 307 whose reason phrase quotes the name, which River's
//     errors column keeps (riverhook's run error quotes a redirect);
//   - running: 500 with the body as it came, then an attempt that hangs
//     until it is cancelled, telling entered when it starts.
type echoReceiver struct {
	mu       sync.Mutex
	attempts map[string]int // by scenario
	entered  chan struct{}  // closed when "running" makes its second attempt
}

func (e *echoReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	p, err := webhook.ParsePayload(body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	scenario, _ := p.User.Metadata["scenario"].(string)
	e.mu.Lock()
	e.attempts[scenario]++
	n := e.attempts[scenario]
	e.mu.Unlock()
	switch {
	case scenario == "given-up" && n <= 2:
		w.WriteHeader(http.StatusInternalServerError)
		escaped := strings.NewReplacer("@", `\u0040`, " ", `\u0020`, "+", `\u002b`).Replace(string(body))
		fmt.Fprintf(w, `{"error":"cannot store","got":%s}`, escaped)
	case scenario == "given-up":
		fmt.Fprintf(w, `{"ok":true,"got":%q}`, base64.StdEncoding.EncodeToString(body))
	case scenario == "refused":
		msg := fmt.Sprintf(`{"error":"the email %s is taken","hint":"%s","phone":"%s"}`, p.User.Email,
			hex.EncodeToString([]byte(p.User.Email)), hex.EncodeToString([]byte(p.User.Phone)))
		rawAnswer(w, "HTTP/1.1 422 "+p.User.Email+" is taken", msg)
	case scenario == "redirected":
		rawAnswer(w, "HTTP/1.1 307 "+p.User.Name+" moved\r\nLocation: https://elsewhere.example/", "")
	case scenario == "running" && n == 1:
		w.WriteHeader(http.StatusInternalServerError)
		w.Write(body)
	case scenario == "running":
		close(e.entered)
		<-r.Context().Done() // until the attempt is cancelled
	default:
		w.Write(body)
	}
}

// rawAnswer writes an HTTP/1.1 answer of the receiver's own making, with
// the status line given (a reason phrase net/http would not write).
func rawAnswer(w http.ResponseWriter, head, body string) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(buf, "%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", head, len(body), body)
	buf.Flush()
}

// TestEraseSubject_LeavesNoTrace erases a user's deliveries, every way a
// receiver quotes a body back (an echo with 200, with 500, a 422 quoting
// the email, a redirect whose reason phrase names them), one resent after
// giving up, one waiting and one running, and reads the schema back with
// pg_dump: no trace of their email, name or phone is left in it, plain,
// JSON-escaped, in base64 at any alignment, or in hex. The other user's
// deliveries keep theirs.
func TestEraseSubject_LeavesNoTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	recv := &echoReceiver{attempts: map[string]int{}, entered: make(chan struct{})}
	b := setupReceiver(t, recv)
	policy := fastPolicy(1)
	w := newWorker(t, b.srv.Sender(&webhook.SenderOptions{Retry: policy}), b.conns.resolve, nil)
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	hold, releaseOnce := holdCancelledRuns()
	client := newClient(t, b.pool, b.schema, workers, func(c *river.Config) { c.Middleware = []rivertype.Middleware{hold} })
	events := finalEvents(t, client)
	start(t, client)
	t.Cleanup(releaseOnce) // before the client stops, which waits for the run

	jobs := map[string]int64{}
	insertFor := func(u webhook.User, scenario string, base *river.InsertOpts) {
		params, err := riverhook.InsertParams(scenario, []string{"crm"}, userPayload(u, scenario, scenario), w.InsertOptions(base))
		require.NoError(t, err)
		inserted, err := client.InsertMany(ctx, params)
		require.NoError(t, err)
		jobs[scenario] = inserted[0].Job.ID
	}
	for _, s := range []string{"delivered", "given-up", "refused", "redirected", "running"} {
		insertFor(erasedUser, s, nil)
	}
	insertFor(erasedUser, "waiting", &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
	insertFor(keptUser, "kept", nil)
	ended := waitFinal(t, events, 5) // all but running and waiting
	require.Equal(t, rivertype.JobStateDiscarded, ended[jobs["given-up"]].State)
	resent, inserted, err := riverhook.Resend(ctx, client, b.pool, jobs["given-up"], "support: the customer fixed their endpoint", w.InsertOptions(nil))
	require.NoError(t, err)
	require.True(t, inserted)
	jobs["resent"] = resent.ID
	ended = waitFinal(t, events, 1)
	require.Equal(t, rivertype.JobStateCompleted, ended[resent.ID].State, "the resend is delivered")
	select {
	case <-recv.entered:
	case <-time.After(60 * time.Second):
		t.Fatal("the running delivery's second attempt did not start within 60 s")
	}

	before := dumpSchema(t, b.schema)
	got := traces(before, erasedUser.Email)
	for _, want := range []string{"plain", "JSON-escaped", "hex"} {
		require.Contains(t, got, want, "the receivers' quotes are in the dump before erasure, so the test can see them")
	}
	require.True(t, strings.Contains(strings.Join(got, ","), "base64"), "the body is in the dump before erasure: %v", got)
	var errs string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT errors::text FROM "+b.schema+".river_job WHERE id = $1", jobs["redirected"]).Scan(&errs))
	require.Contains(t, errs, erasedUser.Name, "River's errors column quotes the redirect's reason phrase")

	res, err := riverhook.EraseSubject(ctx, client, b.pool, erasedUser.ID)
	require.NoError(t, err)
	assert.Equal(t, &riverhook.EraseResult{Erased: 7, Cancelled: 2, UnderWay: 1}, res,
		"the five ended, the resend, the waiting one cancelled, the running one being cancelled, still running")
	assertNoTraces(t, dumpSchema(t, b.schema), erasedUser, "after EraseSubject")

	releaseOnce()
	ended = waitFinal(t, events, 1)
	require.Contains(t, ended, jobs["running"])
	assert.Equal(t, rivertype.JobStateCancelled, ended[jobs["running"]].State, "the running delivery is cancelled")
	after := dumpSchema(t, b.schema)
	assertNoTraces(t, after, erasedUser, "after the cancelled run's final write")
	res, err = riverhook.EraseSubject(ctx, client, b.pool, erasedUser.ID)
	require.NoError(t, err)
	assert.Equal(t, &riverhook.EraseResult{}, res, "nothing left")
	for _, s := range personalStrings(keptUser) {
		assert.Contains(t, traces(after, s), "plain", "the other user's deliveries keep their data: %s", s)
	}

	// The log stays useful: outcomes, statuses, times and runs.
	job, err := client.JobGet(ctx, jobs["given-up"])
	require.NoError(t, err)
	d, err := riverhook.DeliveryOf(job)
	require.NoError(t, err)
	assert.True(t, d.Erased)
	require.Len(t, d.Attempts, 2)
	for i, a := range d.Attempts {
		assert.Equal(t, http.StatusInternalServerError, a.StatusCode)
		assert.Equal(t, webhook.KindStatus, a.Kind)
		assert.Equal(t, i+1, a.Run)
		assert.False(t, a.Start.IsZero())
		assert.NotZero(t, a.Timestamp)
	}
	assert.Equal(t, "riverhook: the policy gave up after attempt 2", d.Reason)
	job, err = client.JobGet(ctx, jobs["waiting"])
	require.NoError(t, err)
	d, err = riverhook.DeliveryOf(job)
	require.NoError(t, err)
	assert.Equal(t, riverhook.StatusCancelled, d.Status)
	assert.Equal(t, "riverhook: cancelled in River (client.JobCancel, River UI's Cancel, or EraseSubject)", d.Reason)

	// An erased delivery run again (River UI's Retry) sends nothing: there
	// is no body; its job is cancelled saying so.
	sent := len(b.srv.Deliveries())
	_, err = client.JobRetry(ctx, jobs["delivered"])
	require.NoError(t, err)
	ended = waitFinal(t, events, 1)
	require.Contains(t, ended, jobs["delivered"])
	d, err = riverhook.DeliveryOf(ended[jobs["delivered"]])
	require.NoError(t, err)
	assert.Equal(t, riverhook.StatusCancelled, d.Status)
	assert.Equal(t, "riverhook: the delivery's body was erased", d.Reason)
	assert.Len(t, b.srv.Deliveries(), sent, "nothing sent")
	assertNoTraces(t, dumpSchema(t, b.schema), erasedUser, "after an erased delivery ran again")
	res, err = riverhook.EraseSubject(ctx, client, b.pool, erasedUser.ID)
	require.NoError(t, err)
	assert.Equal(t, &riverhook.EraseResult{}, res, "its cancel quotes nothing")
}

// answerAfterCancel is the RoundTripper of a Sender whose first request is
// answered 500 quoting the body back, which the attempt log keeps, and whose
// second is answered 200 once its context is done: the answer net/http's
// Transport returns when it reads one while it closes the connection of a
// cancelled request (persistConn.roundTrip: "Check for a response racing
// the context close, and use the response if available"), as a receiver
// answering the close of that connection gives it
// (TestEraseSubject_LeavesNoTrace's echoReceiver does).
type answerAfterCancel struct {
	n       atomic.Int32
	entered chan struct{} // closed when the second request waits for its cancel
}

func (rt *answerAfterCancel) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	resp := &http.Response{Status: "500 Internal Server Error", StatusCode: http.StatusInternalServerError,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: r}
	if rt.n.Add(1) == 2 {
		close(rt.entered)
		<-r.Context().Done()
		resp.Status, resp.StatusCode, resp.Body, resp.ContentLength = "200 OK", http.StatusOK, http.NoBody, 0
	}
	return resp, nil
}

// TestEraseSubject_AnswerReadAfterTheCancel erases the subject of a delivery
// whose running attempt is answered after EraseSubject's cancel reached the
// run: the run writes nothing as it ends (its log, loaded before the
// erasure, would bring the first answer's quote back), and River cancels the
// job. It is the interleaving that made TestEraseSubject_LeavesNoTrace fail
// now and then under load, forced.
func TestEraseSubject_AnswerReadAfterTheCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testDB(t)
	rt := &answerAfterCancel{entered: make(chan struct{})}
	sender, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: rt}, Retry: fastPolicy(1)})
	require.NoError(t, err)
	conns := newResolver(map[string]webhook.Connection{"crm": {Name: "crm", URL: "https://receiver.example/webhooks", Secret: secret}})
	w := newWorker(t, sender, conns.resolve, nil)
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	hold, releaseOnce := holdCancelledRuns()
	client := newClient(t, pool, schema, workers, func(c *river.Config) { c.Middleware = []rivertype.Middleware{hold} })
	events := finalEvents(t, client)
	start(t, client)
	t.Cleanup(releaseOnce) // before the client stops, which waits for the run

	params, err := riverhook.InsertParams("racing", []string{"crm"}, userPayload(erasedUser, "racing", "running"), w.InsertOptions(nil))
	require.NoError(t, err)
	inserted, err := client.InsertMany(ctx, params)
	require.NoError(t, err)
	id := inserted[0].Job.ID
	select {
	case <-rt.entered:
	case <-time.After(60 * time.Second):
		t.Fatal("the delivery's second attempt did not start within 60 s")
	}

	res, err := riverhook.EraseSubject(ctx, client, pool, erasedUser.ID)
	require.NoError(t, err)
	require.Equal(t, &riverhook.EraseResult{Erased: 1, Cancelled: 1, UnderWay: 1}, res, "the running delivery, its first answer quoting the body")
	releaseOnce()
	ended := waitFinal(t, events, 1)
	require.Contains(t, ended, id)
	assert.Equal(t, rivertype.JobStateCancelled, ended[id].State, "the delivery cancelled in River is cancelled, whatever answer its run read after the cancel")
	var row string
	require.NoError(t, pool.QueryRow(ctx, "SELECT row_to_json(j)::text FROM "+schema+".river_job AS j WHERE id = $1", id).Scan(&row))
	assertNoTraces(t, row, erasedUser, "the job's row after the cancelled run's final write")
	res, err = riverhook.EraseSubject(ctx, client, pool, erasedUser.ID)
	require.NoError(t, err)
	assert.Equal(t, &riverhook.EraseResult{}, res, "nothing left")
}

// dumpSchema returns the data of schema's tables as pg_dump writes them.
func dumpSchema(t *testing.T, schema string) string {
	t.Helper()
	bin := pgDump(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--data-only", "--schema="+schema, "--dbname="+os.Getenv("TEST_DATABASE_URL")).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("pg_dump: %v: %s", err, exit.Stderr)
	}
	require.NoError(t, err)
	require.Contains(t, string(out), "river_job", "the dump holds River's job table")
	return string(out)
}

// pgDump returns the path of pg_dump: on the PATH, or in Debian's
// PostgreSQL directories. Without one the test is skipped, or fails under
// CI=true.
func pgDump(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("pg_dump"); err == nil {
		return p
	}
	if found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump"); len(found) > 0 {
		return found[len(found)-1]
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("pg_dump is not installed (Debian: postgresql-client)")
	}
	t.Skip("pg_dump is not installed")
	return ""
}

var (
	jsonEscape  = regexp.MustCompile(`\\u([0-9a-fA-F]{4})`)
	backslashes = regexp.MustCompile(`\\+`)
)

// traces returns the encodings in which s appears in dump: "plain" (in any
// case), "JSON-escaped" (with \uXXXX for some characters), "base64 at N"
// (the base64 of s as it appears in the base64 of a text holding it at an
// offset of N modulo 3) and "hex". A pg_dump's COPY doubles backslashes,
// and a JSON string inside jsonb or an array doubles them again: runs of
// them are read as one.
func traces(dump, s string) []string {
	var found []string
	text := backslashes.ReplaceAllString(dump, `\`)
	if strings.Contains(strings.ToLower(text), strings.ToLower(s)) {
		found = append(found, "plain")
	}
	unescaped := jsonEscape.ReplaceAllStringFunc(text, func(m string) string {
		r, _ := strconv.ParseUint(m[2:], 16, 32)
		return string(rune(r))
	})
	if unescaped != text && strings.Contains(strings.ToLower(unescaped), strings.ToLower(s)) {
		found = append(found, "JSON-escaped")
	}
	for k := range 3 {
		enc := base64.StdEncoding.EncodeToString(append(make([]byte, k), s...))
		if strings.Contains(text, enc[(8*k+5)/6:8*(k+len(s))/6]) {
			found = append(found, "base64 at "+strconv.Itoa(k))
		}
	}
	if strings.Contains(strings.ToLower(text), hex.EncodeToString([]byte(s))) {
		found = append(found, "hex")
	}
	return found
}

// assertNoTraces fails for each of u's personal strings in dump, saying in
// which encodings, and quoting the first line of the dump that holds one.
func assertNoTraces(t *testing.T, dump string, u webhook.User, when string) {
	t.Helper()
	for _, s := range personalStrings(u) {
		if got := traces(dump, s); len(got) > 0 {
			t.Errorf("%s: the dump holds %q %v; first in: %s", when, s, got, lineWith(dump, s))
		}
	}
}

// lineWith returns the first line of dump holding s plainly, cut short,
// its runs of backslashes as one, or a note that it is held otherwise.
func lineWith(dump, s string) string {
	for line := range strings.Lines(backslashes.ReplaceAllString(dump, `\`)) {
		if i := strings.Index(strings.ToLower(line), strings.ToLower(s)); i >= 0 {
			return strconv.Quote(line[max(i-200, 0):min(i+len(s)+40, len(line))])
		}
	}
	return "(encoded only)"
}

// holdCancelledRuns returns a River middleware that holds the end of a run
// cancelled in River until release is called, so that its final write
// lands after an erasure, as it may in production.
func holdCancelledRuns() (hold river.WorkerMiddlewareFunc, release func()) {
	ch := make(chan struct{})
	hold = func(ctx context.Context, _ *rivertype.JobRow, doInner func(context.Context) error) error {
		err := doInner(ctx)
		if errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
			<-ch
		}
		return err
	}
	return hold, sync.OnceFunc(func() { close(ch) })
}

// eraseOnceItWaits erases subject while tx holds a lock the erasure needs,
// commits tx once the erasure waits for a lock, and returns its result.
func eraseOnceItWaits(t *testing.T, s *scenario, tx pgx.Tx, subject string) *riverhook.EraseResult {
	t.Helper()
	ctx := context.Background()
	type result struct {
		res *riverhook.EraseResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := riverhook.EraseSubject(ctx, s.client, s.pool, subject)
		done <- result{res, err}
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND position($1 in query) > 0)`, s.schema).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 5*time.Millisecond, "the erasure waits for a lock tx holds")
	require.NoError(t, tx.Commit(ctx))
	r := <-done
	require.NoError(t, r.err)
	return r.res
}

// TestEraseSubject_AResendCommittedDuringTheErasure: a Resend of one of the
// subject's deliveries (a dashboard's button, in its own transaction) that
// commits while EraseSubject erases is a delivery under way of the subject,
// holding the body: EraseSubject says so (UnderWay), so that the caller
// calls it again, as its documentation promises. It counted what was under
// way in the snapshot its UPDATE took before waiting for the resend's lock
// of the original job, and answered zero: the caller stopped, and the
// resend sent and kept the user's data.
func TestEraseSubject_AResendCommittedDuringTheErasure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newScenario(t)
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	resent, inserted, err := riverhook.ResendTx(ctx, s.client, tx, s.jobs["given-up"], "the endpoint is fixed", s.worker.InsertOptions(nil))
	require.NoError(t, err)
	require.True(t, inserted)

	r := eraseOnceItWaits(t, s, tx, "usr_given-up")

	row, err := s.client.JobGet(ctx, resent.ID)
	require.NoError(t, err)
	d, err := riverhook.DeliveryOf(row)
	require.NoError(t, err)
	if !d.Erased && d.Status != riverhook.StatusCancelled {
		assert.Positive(t, r.UnderWay, "the resend, %s with the body, is under way after the erasure", d.Status)
	}
}

// TestEraseSubject_ARetryCommittedDuringTheErasure: a delivered job of the
// subject that River UI's Retry (client.JobRetry) makes available again
// while EraseSubject erases is a delivery under way, holding the body:
// EraseSubject either erases it (and the Worker then cancels it,
// ErrErased) or says it is under way (UnderWay), as its documentation
// promises ("What is left is in EraseResult.UnderWay"). Its UPDATE waited
// for the retry's lock of the row, found it no longer ended and left it,
// and its count of what is under way read the snapshot taken before the
// wait, where the job had ended: it answered zero, the durable erasure
// completed, and the retried job sent the user's data again.
func TestEraseSubject_ARetryCommittedDuringTheErasure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newScenario(t)
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	retried, err := s.client.JobRetryTx(ctx, tx, s.jobs["delivered"])
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateAvailable, retried.State)

	r := eraseOnceItWaits(t, s, tx, "usr_delivered")

	row, err := s.client.JobGet(ctx, s.jobs["delivered"])
	require.NoError(t, err)
	d, err := riverhook.DeliveryOf(row)
	require.NoError(t, err)
	if !d.Erased {
		assert.Positive(t, r.UnderWay, "the retried job, %s (%s) with the body, is under way after the erasure", d.Status, row.State)
	}
}
