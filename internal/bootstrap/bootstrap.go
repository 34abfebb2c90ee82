// Package bootstrap makes the trust material of one Ayatori installation,
// once, before `kubectl apply -k deploy/overlays/...`: the NATS servers' CA
// and certificate (client TLS and mutual TLS on routes), the NKeys of the
// journal's two NATS identities (manager, read-only forensics reader), and
// the manager's journal signing key (docs/journal.md "Trust model"). The
// test harness makes its servers' material with the same code.
//
// Nothing here is ever logged: the caller writes Manifests to a file that
// only an administrator reads, and applies it.
package bootstrap

import (
	"crypto/x509"
	"time"

	"github.com/nats-io/nkeys"
)

// Validity of the CA and the server certificate made by NewNATS.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 2 * 365 * 24 * time.Hour
)

// NATS is the trust material of the journal's NATS servers and clients.
type NATS struct {
	// CACert is the PEM CA certificate that issued ServerCert (clients and
	// peers verify with it); the CA's key is discarded once it signed.
	CACert []byte
	// ServerCert and ServerKey are the PEM certificate and key every NATS
	// server presents to clients and, as a client certificate, to its
	// route peers (server and client auth).
	ServerCert, ServerKey []byte
	// ManagerSeed and ReaderSeed are the identities' NKey seeds (secret);
	// ManagerPublic and ReaderPublic their public keys (the servers').
	ManagerSeed, ReaderSeed     []byte
	ManagerPublic, ReaderPublic string
}

// NewNATS makes a CA, a server certificate for dnsNames and ips (server
// and client auth: the routes' client certificate too), and the two
// identities.
func NewNATS(dnsNames []string, ips []string, validity time.Duration) (*NATS, error) {
	ca, err := NewCA("Ayatori NATS CA", max(validity, CAValidity))
	if err != nil {
		return nil, err
	}
	cert, err := ca.Issue(dnsNames, ips, validity, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	n := &NATS{CACert: ca.CertPEM, ServerCert: cert.CertPEM, ServerKey: cert.KeyPEM}
	if n.ManagerSeed, n.ManagerPublic, err = newUser(); err != nil {
		return nil, err
	}
	if n.ReaderSeed, n.ReaderPublic, err = newUser(); err != nil {
		return nil, err
	}
	return n, nil
}

// ClusterNames are the DNS names the NATS servers of deploy/ answer to in
// namespace: the client Service and every pod of the headless Service (the
// routes' and the clients' server lists).
func ClusterNames(namespace string) []string {
	var out []string
	for _, suffix := range []string{"", "." + namespace, "." + namespace + ".svc", "." + namespace + ".svc.cluster.local"} {
		out = append(out, "ayatori-nats"+suffix, "*.ayatori-nats-headless"+suffix)
	}
	return out
}

func newUser() (seed []byte, public string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", err
	}
	if seed, err = kp.Seed(); err != nil {
		return nil, "", err
	}
	public, err = kp.PublicKey()
	return seed, public, err
}
