package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"hash/maphash"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
)

// This file holds signing: the header names, Sign, the keyed HMAC state
// kept per secret, and NewSecret.

// Header names of a delivery. http.Header canonicalises names, so these match
// whatever case a request used.
const (
	HeaderEvent     = "X-Service-Event"     // the event kind; not covered by the signature
	HeaderTimestamp = "X-Service-Timestamp" // Unix time in milliseconds, decimal
	HeaderSignature = "X-Service-Signature" // SignaturePrefix + lowercase hex HMAC-SHA256
)

// SignaturePrefix starts every value of [HeaderSignature].
const SignaturePrefix = "sha256="

// signatureLen is the length of a complete signature header value.
const signatureLen = len(SignaturePrefix) + 2*sha256.Size

// Sign returns the value of [HeaderSignature] for a delivery: [SignaturePrefix]
// followed by the lowercase hex HMAC-SHA256, keyed with secret, of the
// decimal timestampMillis, a period and body.
//
// Sign reuses keyed hash states of the secrets it was last called with, in
// a pool the garbage collector empties, so that signing with one secret
// again and again skips key setup; it keeps no secret beyond that. It is
// safe for concurrent use.
func Sign(secret string, timestampMillis int64, body []byte) string {
	var buf [signatureLen]byte
	return string(AppendSignature(buf[:0], secret, timestampMillis, body))
}

// AppendSignature appends the value [Sign] returns to dst and returns the
// extended slice. It does not allocate when dst has room for the 71 bytes.
func AppendSignature(dst []byte, secret string, timestampMillis int64, body []byte) []byte {
	var sum [sha256.Size]byte
	st := oneOffState(secret)
	oneOffs.finish(st, strconv.AppendInt(st.scratch[:0], timestampMillis, 10), body, &sum)
	return appendHex(dst, &sum)
}

func appendHex(dst []byte, sum *[sha256.Size]byte) []byte {
	dst = append(dst, SignaturePrefix...)
	return hex.AppendEncode(dst, sum[:])
}

// SecretPrefix starts every secret [NewSecret] returns, so that secret
// scanners and people can recognise one.
const SecretPrefix = "whsec_"

// NewSecret returns a fresh signing secret for a connection: [SecretPrefix]
// followed by 256 bits from crypto/rand in unpadded URL-safe base64 (49
// characters in all), safe in URLs, headers, environment variables and
// JSON. It is safe for concurrent use.
func NewSecret() string {
	var key [32]byte
	rand.Read(key[:]) // never fails: crypto/rand aborts the program instead
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(key[:])
}

// keyedMAC computes the HMAC of one secret. hmac.New costs as much as hashing
// a kilobyte, so keyed states are pooled and Reset between uses.
type keyedMAC struct {
	pool sync.Pool // of *macState
}

type macState struct {
	mac     hash.Hash
	secret  string            // oneOffs' only: the key of mac
	scratch [sha256.Size]byte // room for the timestamp digits, then the sum
}

var period = []byte{'.'}

func newKeyedMAC(secret string) *keyedMAC {
	k := new(keyedMAC)
	k.init(secret)
	return k
}

// init keys k's states with secret.
func (k *keyedMAC) init(secret string) {
	key := []byte(secret)
	k.pool.New = func() any { return &macState{mac: hmac.New(sha256.New, key)} }
}

// sum writes the HMAC of "<ts>.<body>" to out.
func (k *keyedMAC) sum(ts int64, body []byte, out *[sha256.Size]byte) {
	st := k.pool.Get().(*macState)
	k.finish(st, strconv.AppendInt(st.scratch[:0], ts, 10), body, out)
}

// sumText writes the HMAC of "<tsText>.<body>" to out: the timestamp as the
// header carried it, so that the signed text is the received text. tsText
// has at most maxTimestampDigits bytes.
func (k *keyedMAC) sumText(tsText string, body []byte, out *[sha256.Size]byte) {
	st := k.pool.Get().(*macState)
	k.finish(st, append(st.scratch[:0], tsText...), body, out)
}

// finish hashes ts, a period and body with st, whose scratch holds ts, and
// returns st to the pool.
func (k *keyedMAC) finish(st *macState, ts, body []byte, out *[sha256.Size]byte) {
	st.mac.Reset()
	st.mac.Write(ts)
	st.mac.Write(period)
	st.mac.Write(body)
	copy(out[:], st.mac.Sum(st.scratch[:0]))
	k.pool.Put(st)
}

// oneOffs pools the keyed states of the package-level Sign and Verify, each
// keyed with the secret it was last used with: one secret used again and
// again skips key setup, and the garbage collector empties the pool, so no
// secret is kept for the life of the process.
var oneOffs keyedMAC

// oneOffState returns a state of oneOffs keyed with secret; finish returns
// it to the pool.
func oneOffState(secret string) *macState {
	st, _ := oneOffs.pool.Get().(*macState)
	if st == nil || st.secret != secret {
		st = &macState{mac: hmac.New(sha256.New, []byte(secret)), secret: secret}
	}
	return st
}

// The keyed states of a Sender, for the connections it signs for: sharded,
// each shard an immutable map read without a lock (a string key in a
// sync.Map would allocate on every lookup) and replaced whole, under the
// shard's mutex, when a secret is added (16 entries to copy). Each shard is
// bounded, so a Sender with many connections cannot grow it forever, and
// the cache goes with its Sender.
const (
	keyShards    = 256
	keysPerShard = 16 // 4,096 secrets at most per Sender
)

type keyShard struct {
	keys atomic.Pointer[map[string]*connKey]
	mu   sync.Mutex // held to replace keys
}

// connKey is what a Sender keeps of a connection's secret: its keyed
// states, and the URL last sent to with it, checked: a connection's URL is
// parsed and checked once, not on every delivery (most secrets sign for
// one URL; another one is checked and takes its place).
type connKey struct {
	mac  keyedMAC
	url  atomic.Pointer[checkedURL]
	hash uint64 // the secret's, with the cache's seed: the same for the Sender's life
}

// checkedURL is a URL's text and what validateURL made of it.
type checkedURL struct {
	raw    string
	parsed url.URL
}

type keyCache struct {
	seed   maphash.Seed
	shards [keyShards]keyShard
}

func newKeyCache() *keyCache { return &keyCache{seed: maphash.MakeSeed()} }

// get returns what is kept of secret.
func (c *keyCache) get(secret string) *connKey {
	hash := maphash.String(c.seed, secret)
	s := &c.shards[hash%keyShards]
	if m := s.keys.Load(); m != nil {
		if k, ok := (*m)[secret]; ok {
			return k
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.keys.Load()
	if old != nil {
		if k, ok := (*old)[secret]; ok { // added while this call waited
			return k
		}
	}
	next := make(map[string]*connKey, keysPerShard)
	if old != nil {
		for sec, k := range *old {
			next[sec] = k
		}
	}
	if len(next) >= keysPerShard {
		for evict := range next { // evict one arbitrary entry
			delete(next, evict)
			break
		}
	}
	k := &connKey{hash: hash}
	k.mac.init(secret)
	next[secret] = k
	s.keys.Store(&next)
	return k
}

// checkURL returns validateURL(raw) for a connection signed with k's
// secret: a copy of what it returned before when raw is the URL checked
// last, the caller's to change, its user information too.
func (k *connKey) checkURL(raw string) (*url.URL, error) {
	if last := k.url.Load(); last != nil && last.raw == raw {
		u := last.parsed
		if u.User != nil {
			user := *u.User
			u.User = &user
		}
		return &u, nil
	}
	u, err := validateURL(raw)
	if err != nil {
		return nil, err
	}
	kept := checkedURL{raw: raw, parsed: *u}
	if u.User != nil {
		user := *u.User
		kept.parsed.User = &user
	}
	k.url.Store(&kept)
	return u, nil
}

// appendSignature appends the signature of a delivery with k's secret.
func (k *keyedMAC) appendSignature(dst []byte, ts int64, body []byte) []byte {
	var sum [sha256.Size]byte
	k.sum(ts, body, &sum)
	return appendHex(dst, &sum)
}
