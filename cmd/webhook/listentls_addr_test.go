package main

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// listen -tls -addr on a loopback address other than 127.0.0.1 (the whole
// of 127.0.0.0/8 is this machine's) serves a certificate for that address,
// as its help promises ("and the -addr host"), and the URL it prints to
// send to works.
func TestListen_TLSCertificateCoversTheLoopbackAddressListenedOn(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("127.0.0.2 is not usable here: %v", err)
	}
	probe.Close()
	base, out := startListen(t, "-tls", "-addr", "127.0.0.2:0") // the later -addr is the one taken
	_, pool := trusted(t, out)
	assert.Contains(t, out.String(), "send with: webhook trigger -allow-private -cacert ")
	assert.Contains(t, out.String(), base+"/webhooks", "the URL printed to send to is the one listened on")

	s := trustingSender(t, pool)
	conn := webhook.Connection{Name: "local", URL: base + "/webhooks", Secret: testSecret}
	res, err := s.Send(context.Background(), conn, webhook.SamplePayload(time.Now()))
	require.NoError(t, err, "to %s", base)
	assert.Equal(t, http.StatusOK, res.Attempts[0].StatusCode)
	assert.Contains(t, <-out.each, "verified")
}

// The certificate listen -tls makes for an -addr host verifies, under its
// own CA's name constraints, for that host: an IPv4 address of a LAN
// interface or another loopback address, an IPv6 address, a name.
func TestThrowawayCA_LeafVerifiesForTheAddrHost(t *testing.T) {
	for _, host := range []string{"192.0.2.10", "127.0.0.2", "2001:db8::10", "devbox.internal"} {
		t.Run(host, func(t *testing.T) {
			ca, err := newThrowawayCA(host)
			require.NoError(t, err)
			caCert, err := x509.ParseCertificate(ca.cert)
			require.NoError(t, err)
			leaf, err := x509.ParseCertificate(ca.leaf.Certificate[0])
			require.NoError(t, err)
			pool := x509.NewCertPool()
			pool.AddCert(caCert)
			for _, name := range []string{host, "127.0.0.1", "::1", "localhost"} {
				_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name})
				assert.NoError(t, err, "for %s", name)
			}
			assert.Contains(t, ca.names, host, "what it prints the certificate is for")
		})
	}
}
