package webhooktest_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/webhooktest"
)

// peerCertificate returns the certificate srv presents, checked against
// RootCAs for localhost.
func peerCertificate(t *testing.T, srv *webhooktest.Server) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(srv.URL, "https://"), &tls.Config{RootCAs: webhooktest.RootCAs(), ServerName: "localhost"})
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// TestRootCAs_SignsEveryServer pins the trust model: each Server has a
// certificate of its own for 127.0.0.1, ::1 and localhost, signed by the
// one test CA that Certificate returns, valid on a synctest bubble's clock
// as well as now.
func TestRootCAs_SignsEveryServer(t *testing.T) {
	a := webhooktest.NewServer(secret, nil)
	defer a.Close()
	b := webhooktest.NewServer(secret, nil)
	defer b.Close()
	leafA, leafB := peerCertificate(t, a), peerCertificate(t, b)
	assert.NotEqual(t, leafA.SerialNumber, leafB.SerialNumber, "a certificate for each Server")

	ca := a.Certificate()
	assert.True(t, ca.IsCA)
	assert.Same(t, ca, b.Certificate(), "one CA per process")
	require.NoError(t, leafB.CheckSignatureFrom(ca))
	assert.Equal(t, x509.ECDSA, leafA.PublicKeyAlgorithm)
	assert.False(t, leafA.IsCA)

	for _, at := range []time.Time{time.Now(), time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		for _, name := range []string{"127.0.0.1", "::1", "localhost"} {
			_, err := leafA.Verify(x509.VerifyOptions{Roots: webhooktest.RootCAs(), DNSName: name, CurrentTime: at})
			assert.NoError(t, err, "%s at %v", name, at)
		}
	}
	_, err := leafA.Verify(x509.VerifyOptions{Roots: webhooktest.RootCAs(), DNSName: "example.com"})
	assert.Error(t, err, "for loopback names only")
}

// TestServer_CertificateAsPEMRootTrustsEveryServer pins what riverhook's
// durable example does: Certificate written as a PEM root CA file, read by
// a client of its own, which then reaches every Server.
func TestServer_CertificateAsPEMRootTrustsEveryServer(t *testing.T) {
	a := webhooktest.NewServer(secret, nil)
	defer a.Close()
	b := webhooktest.NewServer(secret, nil)
	defer b.Close()
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Certificate().Raw})))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for _, srv := range []*webhooktest.Server{a, b} {
		resp, err := client.Post(srv.Connection().URL, "application/json", strings.NewReader("{}"))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "reached, and refused: it is not signed")
	}
}

// TestRootCAs_NewPoolEachCall pins that a caller may add to the pool
// without changing what others get.
func TestRootCAs_NewPoolEachCall(t *testing.T) {
	p := webhooktest.RootCAs()
	require.True(t, p.Equal(webhooktest.RootCAs()))
	p.AddCert(&x509.Certificate{Raw: []byte("another"), RawSubject: []byte("another")})
	assert.False(t, p.Equal(webhooktest.RootCAs()))
}
