package webhook_test

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

type vector struct {
	secret    string
	timestamp int64
	body      []byte
	signature string
}

// loadVectors reads testdata/vectors.txt, computed with OpenSSL by
// testdata/vectors.sh.
func loadVectors(t testing.TB) []vector {
	t.Helper()
	var vs []vector
	sc := bufio.NewScanner(strings.NewReader(string(readTestdata(t, "vectors.txt"))))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		require.Len(t, f, 4, "line %q", sc.Text())
		ts, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err)
		vs = append(vs, vector{f[0], ts, readTestdata(t, f[2]), f[3]})
	}
	require.NotEmpty(t, vs)
	return vs
}

func TestSign_KnownAnswers(t *testing.T) {
	for i, v := range loadVectors(t) {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			assert.Equal(t, v.signature, webhook.Sign(v.secret, v.timestamp, v.body))
			buf := []byte("prefix:")
			assert.Equal(t, "prefix:"+v.signature, string(webhook.AppendSignature(buf, v.secret, v.timestamp, v.body)))
		})
	}
}

func TestAppendSignature_DoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	body := []byte(`{"event":"user.identified"}`)
	buf := make([]byte, 0, 128)
	allocs := testing.AllocsPerRun(100, func() {
		buf = webhook.AppendSignature(buf[:0], "whsec_test_secret", 1763719200000, body)
	})
	assert.Zero(t, allocs)
}

// TestSign_ManySecretsConcurrently exercises the keyed-state cache past its
// bound from several goroutines; every signature must still be right.
func TestSign_ManySecretsConcurrently(t *testing.T) {
	v := loadVectors(t)[0]
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2500 {
				webhook.Sign(fmt.Sprintf("secret-%d-%d", g, i), 1, v.body)
				if i%100 == 0 {
					assert.Equal(t, v.signature, webhook.Sign(v.secret, v.timestamp, v.body))
				}
			}
		}()
	}
	wg.Wait()
}

func TestNewSecret(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s := webhook.NewSecret()
		require.True(t, strings.HasPrefix(s, webhook.SecretPrefix), s)
		key, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, webhook.SecretPrefix))
		require.NoError(t, err, "URL-safe base64: %s", s)
		assert.Len(t, key, 32, "256 bits")
		assert.Equal(t, url.QueryEscape(s), s, "needs no escaping")
		assert.False(t, seen[s], "repeated secret")
		seen[s] = true
	}
}
