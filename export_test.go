package webhook

import "crypto/x509"

// TrustForTest makes the default transport of s trust pool, so benchmarks
// can measure that transport against a test server's certificate.
func TrustForTest(s *Sender, pool *x509.CertPool) {
	s.transport.TLSClientConfig.RootCAs = pool
}
