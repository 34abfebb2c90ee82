package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	natsdeploy "git.ddupan.top/panxiao81/ayatori/deploy/nats"
	"git.ddupan.top/panxiao81/ayatori/internal/bootstrap"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// NATSAuth is the trust material of one NATS server or cluster of this
// harness, made per run: a CA and the server certificate it issued
// (127.0.0.1 and localhost; also the routes' client certificate), and the
// NKeys of the two journal identities (deploy/nats auth.conf). Every
// server the harness starts runs the shipped configuration with them, so
// every client of a test is a manager or a reader, over TLS, as in
// deploy/.
type NATSAuth struct {
	// Dir holds everything below.
	Dir string
	// TLSDir holds tls.crt, tls.key and ca.crt (deploy/nats Settings.TLSDir).
	TLSDir string
	// CAFile is the CA certificate clients verify the server with.
	CAFile string
	// ManagerSeedFile and ReaderSeedFile are the identities' NKey seeds.
	ManagerSeedFile, ReaderSeedFile string
	// ManagerPublic and ReaderPublic are their public keys (the server's).
	ManagerPublic, ReaderPublic string
}

// NewNATSAuth makes the material as ayatori-bootstrap does
// (internal/bootstrap), for a server on 127.0.0.1/localhost, under dir.
func NewNATSAuth(dir string) (*NATSAuth, error) {
	a := &NATSAuth{Dir: dir, TLSDir: filepath.Join(dir, "tls")}
	if err := os.MkdirAll(a.TLSDir, 0o700); err != nil {
		return nil, err
	}
	m, err := bootstrap.NewNATS([]string{"localhost"}, []string{"127.0.0.1"}, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	a.CAFile = filepath.Join(a.TLSDir, "ca.crt")
	a.ManagerSeedFile, a.ReaderSeedFile = filepath.Join(dir, "manager.nk"), filepath.Join(dir, "reader.nk")
	a.ManagerPublic, a.ReaderPublic = m.ManagerPublic, m.ReaderPublic
	for path, data := range map[string][]byte{a.CAFile: m.CACert, filepath.Join(a.TLSDir, "tls.crt"): m.ServerCert,
		filepath.Join(a.TLSDir, "tls.key"): m.ServerKey, a.ManagerSeedFile: m.ManagerSeed, a.ReaderSeedFile: m.ReaderSeed} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Settings returns deploy/nats Settings with this material filled in.
func (a *NATSAuth) Settings() natsdeploy.Settings {
	return natsdeploy.Settings{TLSDir: a.TLSDir, ManagerNKey: a.ManagerPublic, ReaderNKey: a.ReaderPublic}
}

// ClientAuth returns the journal.ClientAuth of identity id.
func (a *NATSAuth) ClientAuth(id journal.Identity) journal.ClientAuth {
	seed := a.ManagerSeedFile
	if id == journal.IdentityReader {
		seed = a.ReaderSeedFile
	}
	return journal.ClientAuth{Identity: id, NKeySeedFile: seed, TLSCAFile: a.CAFile}
}

// ClientOptions returns the NATS options of identity id followed by extra.
func (a *NATSAuth) ClientOptions(id journal.Identity, extra ...nats.Option) []nats.Option {
	opts, err := a.ClientAuth(id).Options()
	if err != nil {
		panic(err) // the harness wrote the files itself
	}
	return append(opts, extra...)
}

// ManagerArgs are the manager's NATS flags besides --nats-url.
func (a *NATSAuth) ManagerArgs() []string {
	return []string{"--nats-nkey", a.ManagerSeedFile, "--nats-tls-ca", a.CAFile}
}

// ReaderArgs are ayatori-journal's NATS flags besides --server.
func (a *NATSAuth) ReaderArgs() []string {
	return []string{"--nkey", a.ReaderSeedFile, "--tlsca", a.CAFile}
}

// JournalKeys is the journal signing key of this test process and the
// files the manager reads it from (--journal-signing-key,
// --journal-trusted-keys). One key per process: every store a test opens
// and every manager it starts sign with it, as the replicas of one
// deployment do. The key lives in memory; its files are written into a
// directory their owner removes (a stack's Dir, a test's TempDir), never
// into one of the process's own that nothing would remove.
type JournalKeys struct {
	Key *journal.SigningKey
	// SigningKeyFile is the PEM private key; TrustedKeysFile the PEM
	// public key.
	SigningKeyFile, TrustedKeysFile string
}

var (
	journalKeyOnce sync.Once
	journalKey     *journal.SigningKey
	journalKeyErr  error
)

// JournalSigningKey returns the process's journal signing key, made on
// first use and kept in memory only.
func JournalSigningKey() (*journal.SigningKey, error) {
	journalKeyOnce.Do(func() { journalKey, journalKeyErr = journal.NewSigningKey() })
	return journalKey, journalKeyErr
}

// WriteJournalKeys writes the process's journal key into dir, which the
// caller owns and removes: signing.pem (0600, the private key) and
// trusted.pem (0644, the public key).
func WriteJournalKeys(dir string) (*JournalKeys, error) {
	k, err := JournalSigningKey()
	if err != nil {
		return nil, err
	}
	jk := &JournalKeys{Key: k, SigningKeyFile: filepath.Join(dir, "signing.pem"), TrustedKeysFile: filepath.Join(dir, "trusted.pem")}
	if err := os.WriteFile(jk.SigningKeyFile, k.MarshalPrivatePEM(), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(jk.TrustedKeysFile, k.MarshalPublicPEM(), 0o644); err != nil {
		return nil, err
	}
	return jk, nil
}

// TestJournalKeys writes the process's journal key into a directory of
// t's (removed when t ends).
func TestJournalKeys(t testing.TB) *JournalKeys {
	t.Helper()
	jk, err := WriteJournalKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return jk
}

// ManagerJournalArgs are the manager's journal key flags.
func (k *JournalKeys) ManagerJournalArgs() []string {
	return []string{"--journal-signing-key", k.SigningKeyFile, "--journal-trusted-keys", k.TrustedKeysFile}
}

// render writes the shipped NATS configuration for one server into dir.
func (a *NATSAuth) render(dir string, s natsdeploy.Settings) (string, error) {
	s.TLSDir, s.ManagerNKey, s.ReaderNKey = a.TLSDir, a.ManagerPublic, a.ReaderPublic
	p, err := natsdeploy.Render(dir, s)
	if err != nil {
		return "", fmt.Errorf("nats config: %w", err)
	}
	return p, nil
}
