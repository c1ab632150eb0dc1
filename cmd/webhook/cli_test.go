package main

import (
	"errors"
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseArgs_FlagsBeforeAndAfterArguments(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		positional []string
		payload    string
		allow      bool
		wantErr    bool
	}{
		{"flags first", []string{"-allow-http", "-payload", "user.json", "URL"}, []string{"URL"}, "user.json", true, false},
		{"flags after the argument", []string{"-allow-http", "URL", "-payload", "user.json"}, []string{"URL"}, "user.json", true, false},
		{"boolean flag after the argument", []string{"URL", "-allow-http"}, []string{"URL"}, "", true, false},
		{"boolean flag before an argument", []string{"-allow-http", "URL"}, []string{"URL"}, "", true, false},
		{"name=value", []string{"URL", "--payload=a=b.json", "-allow-http=false"}, []string{"URL"}, "a=b.json", false, false},
		{"standard input is a value", []string{"-payload", "-", "URL"}, []string{"URL"}, "-", false, false},
		{"a value that looks like a flag", []string{"-payload", "-allow-http", "URL"}, []string{"URL"}, "-allow-http", false, false},
		{"- alone is an argument", []string{"-", "-allow-http"}, []string{"-"}, "", true, false},
		{"-- ends the flags", []string{"-allow-http", "--", "-payload", "x"}, []string{"-payload", "x"}, "", true, false},
		{"arguments in order", []string{"a", "-allow-http", "b", "-payload", "p", "c"}, []string{"a", "b", "c"}, "p", true, false},
		{"unknown flag", []string{"URL", "-no-such-flag"}, nil, "", false, true},
		{"value missing", []string{"URL", "-payload"}, nil, "", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			payload := fs.String("payload", "", "")
			allow := fs.Bool("allow-http", false, "")
			got, err := parseArgs(fs, tc.args)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.positional, got)
			assert.Equal(t, tc.payload, *payload)
			assert.Equal(t, tc.allow, *allow)
		})
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	_, err := parseArgs(fs, []string{"URL", "-h"})
	assert.True(t, errors.Is(err, flag.ErrHelp), "got %v, want flag.ErrHelp", err)
}
