package console

import (
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// TestSupersededBy: what the serving process's Sender knows of an origin or
// a URL gives way to a mark of the same one that changed later, and to no
// other.
func TestSupersededBy(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const origin = "https://crm.example.com:443"
	down := webhook.EndpointHealth{Endpoint: origin, Down: true, Since: t0.Add(-time.Minute), Changed: t0}
	failing := webhook.EndpointHealth{Endpoint: origin, Since: t0, Failures: 1}
	isolated := webhook.EndpointHealth{Endpoint: origin + "/…", Down: true, Changed: t0, PerURL: true, URLKey: "k1"}
	up := func(at time.Duration) webhook.EndpointHealth {
		return webhook.EndpointHealth{Endpoint: origin, Changed: t0.Add(at)}
	}
	urlUp := func(key string, at time.Duration) webhook.EndpointHealth {
		return webhook.EndpointHealth{Endpoint: origin + "/…", Changed: t0.Add(at), PerURL: true, URLKey: key}
	}
	for _, tc := range []struct {
		name  string
		own   webhook.EndpointHealth
		marks []webhook.EndpointHealth
		want  bool
	}{
		{"down, then marked up elsewhere", down, []webhook.EndpointHealth{up(time.Second)}, true},
		{"down, after an older up", down, []webhook.EndpointHealth{up(-time.Second)}, false},
		{"down, the mark it read", down, []webhook.EndpointHealth{down}, false},
		{"failing, then confirmed up elsewhere", failing, []webhook.EndpointHealth{up(time.Second)}, true},
		{"down, then confirmed up through a URL", down, []webhook.EndpointHealth{{Endpoint: origin, Changed: t0.Add(time.Second), Confirmed: true, URLKey: "k1"}}, true},
		{"failing since after the last up", failing, []webhook.EndpointHealth{up(-time.Second)}, false},
		{"down, a URL of it up later", down, []webhook.EndpointHealth{urlUp("k1", time.Second)}, false},
		{"isolated, its URL up later", isolated, []webhook.EndpointHealth{urlUp("k1", time.Second)}, true},
		{"isolated, another URL up later", isolated, []webhook.EndpointHealth{urlUp("k2", time.Second)}, false},
		{"isolated, its origin up later", isolated, []webhook.EndpointHealth{up(time.Second)}, false},
		{"no marks", down, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := supersededBy(tc.own, tc.marks); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestListQuery_AStatusRepeatedIsAskedOnce: a link with one status
// repeated thousands of times asks for it once, not with as many ORs in the
// listing's query (review).
func TestListQuery_AStatusRepeatedIsAskedOnce(t *testing.T) {
	q := url.Values{"status": slices.Repeat([]string{"given_up,delivered", "delivered"}, 5000)}
	p, err := listQuery(q, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want := []riverhook.Status{riverhook.StatusDelivered, riverhook.StatusGivenUp}; !slices.Equal(p.Statuses, want) {
		t.Errorf("statuses %v, want %v", p.Statuses, want)
	}
}
