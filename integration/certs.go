package integration

import (
	"crypto/x509"
	"time"

	"git.ddupan.top/panxiao81/ayatori/internal/bootstrap"
)

// CA is a throwaway certificate authority made per run (bootstrap.CA).
// Tests use one as the trusted CA of a server and another as an "untrusted
// CA" for negative tests.
type CA = bootstrap.CA

// ServerCert is a PEM certificate and key pair issued by a CA.
type ServerCert = bootstrap.Certificate

// NewCA creates a self-signed CA valid for one day.
func NewCA(commonName string) (*CA, error) { return bootstrap.NewCA(commonName, 24*time.Hour) }

// issueServer issues a server certificate with the given DNS and IP SANs,
// valid for one day. A certificate with the wrong SANs (for example DNS
// "wrong.example") is how the negative host-name tests are built.
func issueServer(ca *CA, dnsNames, ips []string) (*ServerCert, error) {
	return ca.Issue(dnsNames, ips, 24*time.Hour, x509.ExtKeyUsageServerAuth)
}
