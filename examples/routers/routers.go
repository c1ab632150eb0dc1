// Package routers shows webhook receivers for three popular routers, chi,
// gin and echo, each verifying deliveries with the library's
// [webhook.Verifier] before the handler runs and handing it the identical
// raw body. It is a nested module so that the library itself depends on none
// of them.
//
// The pattern is the same everywhere: verify first (the middleware reads
// the body under its size limit, checks signature and window, answers 401 or
// 413, and restores r.Body), then read the raw body and decode it.
package routers

import (
	"context"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"

	"github.com/signedhook/webhook"
)

// OnPayload is called with each verified payload; an error answers 500 so
// that the service retries.
type OnPayload func(ctx context.Context, p webhook.Payload, raw []byte) error

// Methods are the methods a delivery may come with: its connection's,
// POST, PUT or PATCH.
var Methods = []string{http.MethodPost, http.MethodPut, http.MethodPatch}

// Chi returns a chi router serving /webhooks to each of [Methods]. chi
// takes the library's middleware as it is.
func Chi(v *webhook.Verifier, on OnPayload) http.Handler {
	r := chi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(v.Middleware)
		for _, method := range Methods {
			r.MethodFunc(method, "/webhooks", func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(handle(r.Context(), r.Body, on))
			})
		}
	})
	return r
}

// GinVerify is gin middleware that verifies each request with v, answering
// as [webhook.Verifier.Middleware] does (same status, body, logging and
// ErrorHandler) and aborting the chain when it refuses. The rest of the
// chain runs inside the library's middleware, while the verified body is
// readable.
func GinVerify(v *webhook.Verifier) gin.HandlerFunc {
	return func(c *gin.Context) {
		passed := false
		v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			passed = true
			c.Request = r // its Body holds the verified bytes
			c.Next()
			// The chain wrote to c.Writer, beneath the middleware's writer:
			// tell the middleware the status gin answers, which decides
			// whether the delivery was handled (a copy of a failed one is
			// handled, a copy of a handled one acknowledged).
			w.WriteHeader(c.Writer.Status())
		})).ServeHTTP(c.Writer, c.Request)
		if !passed {
			c.Abort()
		}
	}
}

// Gin returns a gin engine serving /webhooks to each of [Methods].
func Gin(v *webhook.Verifier, on OnPayload) http.Handler {
	r := gin.New()
	r.Match(Methods, "/webhooks", GinVerify(v), func(c *gin.Context) {
		c.Status(handle(c.Request.Context(), c.Request.Body, on))
	})
	return r
}

// EchoVerify is echo middleware that verifies each request with v, as
// [webhook.Verifier.Middleware] does. Unlike echo.WrapMiddleware, it has an
// error the rest of the chain returns answered (by echo's HTTPErrorHandler)
// inside the library's middleware: the status answered decides whether the
// delivery was handled, and a delivery answered 500 is forgotten, so that
// its copy is handled.
func EchoVerify(v *webhook.Verifier) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r) // its Body holds the verified bytes
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err := next(c); err != nil {
					c.Error(err)
				}
			})).ServeHTTP(c.Response(), c.Request())
			return nil
		}
	}
}

// Echo returns an echo instance serving /webhooks to each of [Methods].
func Echo(v *webhook.Verifier, on OnPayload) http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Match(Methods, "/webhooks", func(c echo.Context) error {
		return c.NoContent(handle(c.Request().Context(), c.Request().Body, on))
	}, EchoVerify(v))
	return e
}

// handle reads the verified raw body, decodes it and calls on; it returns
// the status to answer.
func handle(ctx context.Context, body io.Reader, on OnPayload) int {
	raw, err := io.ReadAll(body) // the bytes that were verified, unchanged
	if err != nil {
		return http.StatusBadRequest
	}
	p, err := webhook.ParsePayload(raw)
	if err != nil {
		return http.StatusBadRequest
	}
	if p.Event != webhook.EventUserIdentified || p.IsSendTest() {
		return http.StatusOK // unknown kinds are acknowledged; Send Tests are not stored
	}
	if err := on(ctx, p, raw); err != nil {
		return http.StatusInternalServerError
	}
	return http.StatusOK
}
