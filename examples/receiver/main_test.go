package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplitSecrets(t *testing.T) {
	tests := map[string][]string{
		"whsec_a":                 {"whsec_a"},
		"whsec_old, whsec_new":    {"whsec_old", "whsec_new"},
		" whsec_old ,whsec_new, ": {"whsec_old", "whsec_new"},
		"":                        nil,
	}
	for in, want := range tests {
		if diff := cmp.Diff(want, splitSecrets(in)); diff != "" {
			t.Errorf("splitSecrets(%q) (-want +got):\n%s", in, diff)
		}
	}
}
