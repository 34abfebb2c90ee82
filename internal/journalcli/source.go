package journalcli

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Source is where the journal is read, as ayatori-journal's flags name it:
// a NATS server with the read-only identity, or an exported file.
type Source struct {
	Server, Creds, NKey, TLSCA, TLSCert, TLSKey string
	// TrustedKeys: PEM public keys of the manager's signing keys (a file or
	// a directory); "" leaves proofs of origin unchecked.
	TrustedKeys string
	// Stream and SubjectPrefix ("": the defaults).
	Stream, SubjectPrefix string
	// FromFile reads an export instead of NATS.
	FromFile string
	// Timeout bounds the whole read (0: 30 s).
	Timeout time.Duration
}

// Args are the ayatori-journal flags that read from s (for running its
// commands).
func (s Source) Args() []string {
	var out []string
	add := func(flag, v string) {
		if v != "" {
			out = append(out, "--"+flag+"="+v)
		}
	}
	add("server", s.Server)
	add("creds", s.Creds)
	add("nkey", s.NKey)
	add("tlsca", s.TLSCA)
	add("tlscert", s.TLSCert)
	add("tlskey", s.TLSKey)
	add("trusted-keys", s.TrustedKeys)
	add("stream", s.Stream)
	add("subject-prefix", s.SubjectPrefix)
	add("from-file", s.FromFile)
	if s.Timeout > 0 {
		add("timeout", s.Timeout.String())
	}
	return out
}

func (s Source) options() *globalOptions {
	g := &globalOptions{server: s.Server, creds: s.Creds, nkey: s.NKey, tlsCA: s.TLSCA, tlsCert: s.TLSCert, tlsKey: s.TLSKey,
		trusted: s.TrustedKeys, stream: s.Stream, prefix: s.SubjectPrefix, fromFile: s.FromFile, timeout: s.Timeout}
	if g.server == "" && g.fromFile == "" {
		g.server = nats.DefaultURL
	}
	if g.stream == "" {
		g.stream = journal.DefaultStreamName
	}
	if g.prefix == "" {
		g.prefix = journal.DefaultSubjectPrefix
	}
	if g.timeout <= 0 {
		g.timeout = 30 * time.Second
	}
	return g
}

// ReadObject returns the records of one object UID in stream order. With
// TrustedKeys, records without a valid proof of origin are left out and
// counted in untrusted (-1: proofs not checked).
func ReadObject(ctx context.Context, s Source, uid string) (recs []journal.Record, untrusted int, err error) {
	if err := journal.ValidateUID(uid); err != nil {
		return nil, 0, err
	}
	g := s.options()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	src, err := g.open(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer src.close()
	all, err := src.uid(ctx, uid)
	if err != nil {
		return nil, 0, err
	}
	bad := g.checkTrust(all, uid, src.verdicts())
	if bad == nil {
		return all, -1, nil
	}
	for _, r := range all {
		if _, ok := bad[r.Sequence]; !ok {
			recs = append(recs, r)
		}
	}
	return recs, len(bad), nil
}
