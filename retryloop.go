package webhook

import (
	"context"
	"net/http"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// This file is the one place go-retryablehttp is used: it runs its retry
// loop with a delivery's hooks. The loop sends a request, asks the hooks
// after each try whether to retry and after how long, waits on the
// request's context, and asks them for the next request.

// hooks is what a delivery gives the loop.
type hooks interface {
	// finish records the try that ended with resp or err, and says
	// whether to retry it and after how long.
	finish(resp *http.Response, err error) (retry bool, wait time.Duration)

	// prepare returns the request of the next try, made from the last
	// one, or why there is none.
	prepare(last *http.Request) (*http.Request, error)
}

// retryLoop runs go-retryablehttp's loop for a delivery. Its client, bound
// to the loop's methods, is built once per pooled delivery.
type retryLoop struct {
	rc   retryablehttp.Client
	h    hooks
	req  retryablehttp.Request // the try in flight's
	ctx  context.Context       // the delivery's, on which the loop waits for a retry
	wait time.Duration         // the last finish's
}

func newRetryLoop(client *http.Client, h hooks) *retryLoop {
	l := &retryLoop{h: h}
	l.rc = retryablehttp.Client{
		HTTPClient:   client,
		Logger:       nil, // never go-retryablehttp's stderr logger
		CheckRetry:   l.checkRetry,
		Backoff:      func(time.Duration, time.Duration, int, *http.Response) time.Duration { return l.wait },
		PrepareRetry: l.prepareRetry,
		ErrorHandler: func(resp *http.Response, err error, _ int) (*http.Response, error) { return resp, err },
	}
	return l
}

// do sends first, then up to maxRetries retries as the hooks decide. ctx
// is the delivery's: first's own context bounds its try alone. It returns
// the loop's error: a context done while waiting for a retry, or why
// prepare made none.
func (l *retryLoop) do(ctx context.Context, first *http.Request, maxRetries int) error {
	l.ctx, l.req = ctx, retryablehttp.Request{Request: first}
	l.rc.RetryMax = maxRetries
	resp, err := l.rc.Do(&l.req)
	if resp != nil {
		resp.Body.Close() // read by finish already
	}
	l.forget()
	return err
}

// forget lets go of the delivery's context and request (its signed
// headers), also after a panic in the round trip (delivery.abandon).
func (l *retryLoop) forget() { l.ctx, l.req = nil, retryablehttp.Request{} }

func (l *retryLoop) checkRetry(_ context.Context, resp *http.Response, err error) (bool, error) {
	retry, wait := l.h.finish(resp, err)
	l.wait = wait
	if retry {
		// go-retryablehttp waits for the retry on the request's context:
		// the delivery's, not the try's, which has ended.
		l.req.Request = l.req.Request.WithContext(l.ctx)
	}
	return retry, nil
}

func (l *retryLoop) prepareRetry(last *http.Request) error {
	next, err := l.h.prepare(last)
	if err != nil {
		return err
	}
	l.req.Request = next // go-retryablehttp sends whatever req.Request is now
	return nil
}
