package journal

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

// ClientPingInterval is how often a journal client pings its server. With
// two pings outstanding allowed, a server that stops answering without
// closing the connection (a network partition, a frozen host) is declared
// stale after two to three intervals (4-6 s), and the client reconnects
// to another server of its URL list (docs/journal.md "R3 cluster"). The
// client library's default (2 minutes, so 4-6 minutes to notice) would
// keep a manager stuck on a partitioned server for that long; 5 s (10-15 s
// to notice) left appends stopped for 15-20 s, longer than an election. A
// ping costs a few bytes each way; a server must fail to answer two in a
// row (4 s) before the connection is dropped.
const ClientPingInterval = 2 * time.Second

// ClientOptions are the NATS connection options of a long-running journal
// client (the manager): reconnect forever, one second between attempts on
// one server, and pings every ClientPingInterval. Give nats.Connect every
// server's URL, comma-separated; the client also learns the cluster's
// other servers from the one it reaches.
func ClientOptions(name string) []nats.Option {
	return []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second),
		nats.PingInterval(ClientPingInterval), nats.MaxPingsOutstanding(2)}
}

// Identity is one of the two NATS identities of the journal (deploy/nats
// auth.conf): the manager, which writes and executes, and the forensics
// reader, which only reads.
type Identity string

// The journal's identities.
const (
	IdentityManager Identity = "manager"
	IdentityReader  Identity = "reader"
)

// InboxPrefix is the reply subject prefix of the identity's client: the
// server lets each identity subscribe to its own prefix only, so neither
// can read the other's replies (records it asked for, intents delivered).
func (id Identity) InboxPrefix() string { return "_INBOX_ayatori_" + string(id) }

// ClientAuth says how a journal client proves who it is and checks the
// server: an NKey seed file (or a JWT credentials file), and the CA that
// issued the server's certificate. Every journal client runs with TLS and
// an identity; the files are read by the NATS client, never logged.
type ClientAuth struct {
	// Identity selects the inbox prefix (InboxPrefix).
	Identity Identity
	// NKeySeedFile holds the identity's NKey seed ("SU...").
	NKeySeedFile string
	// CredsFile is a NATS JWT credentials file (an alternative to the seed).
	CredsFile string
	// TLSCAFile is the PEM CA bundle that verifies the server's
	// certificate (empty: the system roots).
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are an optional client certificate.
	TLSCertFile, TLSKeyFile string
}

// Options returns the NATS options for a: the identity's inbox prefix,
// its NKey or credentials, and TLS. Without a seed or credentials file it
// is an error: the journal has no anonymous client.
func (a ClientAuth) Options() ([]nats.Option, error) {
	if a.Identity == "" {
		return nil, errors.New("journal: NATS client: no identity")
	}
	opts := []nats.Option{nats.CustomInboxPrefix(a.Identity.InboxPrefix())}
	switch {
	case a.NKeySeedFile != "" && a.CredsFile != "":
		return nil, errors.New("journal: NATS client: give an NKey seed file or a credentials file, not both")
	case a.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(a.NKeySeedFile)
		if err != nil {
			// The client's error names the file, never its content.
			return nil, fmt.Errorf("journal: NATS NKey seed: %w", err)
		}
		opts = append(opts, o)
	case a.CredsFile != "":
		if _, err := os.Stat(a.CredsFile); err != nil {
			return nil, fmt.Errorf("journal: NATS credentials: %w", err)
		}
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	default:
		return nil, fmt.Errorf("journal: NATS client (%s): no NKey seed or credentials file; the journal server admits no anonymous client", a.Identity)
	}
	if a.TLSCAFile != "" {
		if _, err := os.Stat(a.TLSCAFile); err != nil {
			return nil, fmt.Errorf("journal: NATS TLS CA: %w", err)
		}
		opts = append(opts, nats.RootCAs(a.TLSCAFile))
	} else {
		opts = append(opts, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	if a.TLSCertFile != "" || a.TLSKeyFile != "" {
		opts = append(opts, nats.ClientCert(a.TLSCertFile, a.TLSKeyFile))
	}
	return opts, nil
}

// PermissionError reports the last permissions violation the server sent
// on nc (nil: none), for a clear message when a request times out because
// the identity may not make it.
func PermissionError(nc *nats.Conn) error {
	if err := nc.LastError(); err != nil && errors.Is(err, nats.ErrPermissionViolation) {
		return err
	}
	return nil
}
