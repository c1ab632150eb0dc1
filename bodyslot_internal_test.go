package webhook

import (
	"bytes"
	"errors"
	"sync"
	"testing"
)

// A view of a request's body issued before its slot was released reads
// nothing and reports no mark, while the slot serves the next request and
// that request's middleware sets its mark and bytes without a lock (as
// serveVerified does): under -race, the late view's checks touch nothing
// but the generation.
func TestBodySlot_ALateViewSeesNothingOfTheNextRequest(t *testing.T) {
	v := &Verifier{}
	s := &bodySlot{}
	first := &serving{slot: s, gen: s.gen}
	s.r.Reset([]byte("first request"))
	s.mark = claimMark{by: v, sig: [32]byte{1}}
	if m, ok := (*servedBody)(first).claimed(); !ok || m.sig[0] != 1 {
		t.Fatalf("while served: mark %v, %v", m, ok)
	}
	s.release(nil)

	var wg sync.WaitGroup
	wg.Go(func() { // the next request, set up as serveVerified does
		next := &serving{slot: s, gen: s.gen}
		s.r.Reset([]byte("second request"))
		s.mark = claimMark{by: v, sig: [32]byte{2}}
		got := make([]byte, 64)
		n, err := (*servedBody)(next).Read(got)
		if err != nil || !bytes.Equal(got[:n], []byte("second request")) {
			t.Errorf("the next request reads %q, %v", got[:n], err)
		}
	})
	for range 100 {
		if m, ok := (*servedBody)(first).claimed(); ok {
			t.Fatalf("a late view reports a mark: %x", m.sig[:1])
		}
		got := make([]byte, 64)
		if n, err := (*servedBody)(first).Read(got); n != 0 || !errors.Is(err, errBodyAfterServe) {
			t.Fatalf("a late read: %q, %v", got[:n], err)
		}
	}
	wg.Wait()
}
