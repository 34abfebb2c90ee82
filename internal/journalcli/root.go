package journalcli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"git.ddupan.top/panxiao81/ayatori/internal/redact"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// globalOptions are the flags every subcommand shares.
type globalOptions struct {
	server   string
	creds    string
	nkey     string
	tlsCA    string
	tlsCert  string
	tlsKey   string
	trusted  string
	stream   string
	prefix   string
	fromFile string
	output   string
	timeout  time.Duration

	// trust is --trusted-keys, loaded by open (nil: proofs not checked).
	trust *journal.TrustedKeys
}

type exitCoder interface{ ExitCode() int }

type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) ExitCode() int { return e.code }

// Exit statuses: 0 success, 1 invariant violations (verify), 2 any other
// error (bad flags, unreachable server, unreadable file), 3 object not
// found.
const exitOtherError = 2

// ExitCode maps the error Execute returned to the process exit status.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return exitOtherError
}

func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:   "ayatori-journal",
		Short: "Read Ayatori's operation journal for incident forensics",
		Long: `ayatori-journal reads the operation journal (NATS JetStream) that records every
intended external action (intent) and what came of it (outcome), keyed by object UID.

Connect with --server (or NATS_URL) as the journal's read-only identity (--nkey with its
NKey seed, --tlsca with the CA of the NATS servers), or analyse an exported NDJSON file
offline with --from-file. With --trusted-keys every record's proof of origin is checked.

Exit status: 0 success, 1 invariant violations (verify), 2 any other error (flags,
connection, file), 3 object not found.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVarP(&g.server, "server", "s", envOr("NATS_URL", nats.DefaultURL), "NATS server URL (env NATS_URL)")
	// The default may come from NATS_URL: --help shows it without credentials.
	pf.Lookup("server").DefValue = redact.URLList(g.server)
	pf.StringVar(&g.creds, "creds", os.Getenv("NATS_CREDS"), "NATS user credentials file (env NATS_CREDS)")
	pf.StringVar(&g.nkey, "nkey", os.Getenv("NATS_NKEY"), "NATS NKey seed file (env NATS_NKEY)")
	pf.StringVar(&g.tlsCA, "tlsca", os.Getenv("NATS_CA"), "CA file to verify the NATS server (env NATS_CA)")
	pf.StringVar(&g.tlsCert, "tlscert", os.Getenv("NATS_CERT"), "client certificate file (env NATS_CERT)")
	pf.StringVar(&g.tlsKey, "tlskey", os.Getenv("NATS_KEY"), "client key file (env NATS_KEY)")
	pf.StringVar(&g.trusted, "trusted-keys", os.Getenv("AYATORI_JOURNAL_TRUSTED_KEYS"), "PEM Ed25519 public keys (a file or a directory) of the manager's journal signing keys: records without a valid proof by one of them are flagged untrusted, left out of timeline, replay and list, and reported by verify (env AYATORI_JOURNAL_TRUSTED_KEYS)")
	pf.StringVar(&g.stream, "stream", journal.DefaultStreamName, "journal stream name")
	pf.StringVar(&g.prefix, "subject-prefix", journal.DefaultSubjectPrefix, "journal subject prefix")
	pf.StringVar(&g.fromFile, "from-file", "", "read records from an NDJSON file written by the export command instead of NATS")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.DurationVar(&g.timeout, "timeout", 30*time.Second, "overall timeout for reading the journal (not for --follow)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if g.output != "table" && g.output != "json" {
			return fmt.Errorf("--output must be table or json, got %q", g.output)
		}
		if g.timeout <= 0 {
			return fmt.Errorf("--timeout must be a positive duration, got %s", g.timeout)
		}
		// Both become subject tokens (the stream name in JetStream API
		// subjects): a wildcard would widen what is read.
		if err := journal.ValidateStreamName(g.stream); err != nil {
			return fmt.Errorf("--stream %w", err)
		}
		if err := journal.ValidateSubjectPrefix(g.prefix); err != nil {
			return fmt.Errorf("--subject-prefix %w", err)
		}
		if g.fromFile == "" {
			for _, s := range strings.Split(g.server, ",") {
				if scheme, _, ok := strings.Cut(strings.TrimSpace(s), "://"); ok {
					switch strings.ToLower(scheme) {
					case "nats", "tls", "ws", "wss":
					default:
						return fmt.Errorf("--server: %s:// is not a NATS URL scheme (use nats://host:4222, tls://, ws:// or wss://)", scheme)
					}
				}
			}
		}
		return nil
	}
	root.AddCommand(newTimelineCommand(g), newReplayCommand(g), newVerifyCommand(g), newListCommand(g), newExportCommand(g))
	return root
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// source is where records come from: a live stream or an exported file.
type source interface {
	// uid returns every record of one UID in order.
	uid(ctx context.Context, uid string) ([]journal.Record, error)
	// all returns every record (and the sequences of undecodable ones).
	all(ctx context.Context, since *time.Time) ([]journal.Record, []uint64, error)
	// follow streams records of uid after seq until ctx is done: each
	// to fn with a nil error, or, for one left out (undecodable; with
	// --trusted-keys without a valid proof), with why.
	follow(ctx context.Context, uid string, after uint64, fn func(journal.Record, error)) error
	// verdicts are the records (by sequence) that uid and all delivered
	// but the source found without a valid proof of origin, with why: the
	// store's check (proof, newer schema without a message proof, a record
	// stored on another object's or type's subject), or an export's note
	// of it. checkTrust adds its own. Empty without --trusted-keys.
	verdicts() map[uint64]string
	close()
}

func (g *globalOptions) open(ctx context.Context) (source, error) {
	if g.trusted != "" && g.trust == nil {
		t, err := journal.LoadTrustedKeys(g.trusted)
		if err != nil {
			return nil, fmt.Errorf("--trusted-keys: %w", err)
		}
		g.trust = t
	}
	if g.fromFile != "" {
		return openFile(g.fromFile, g.trust != nil)
	}
	auth := journal.ClientAuth{Identity: journal.IdentityReader, NKeySeedFile: g.nkey, CredsFile: g.creds,
		TLSCAFile: g.tlsCA, TLSCertFile: g.tlsCert, TLSKeyFile: g.tlsKey}
	authOpts, err := auth.Options()
	if err != nil {
		return nil, fmt.Errorf("%w (--nkey or --creds, env NATS_NKEY or NATS_CREDS)", err)
	}
	opts := append([]nats.Option{nats.Name("ayatori-journal"), nats.Timeout(10 * time.Second),
		// A refused request is reported by LastError; nothing to print here.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}, authOpts...)
	nc, err := nats.Connect(g.server, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) {
			err = fmt.Errorf("%w: the server refused these credentials (the journal's read-only identity needs its NKey seed: --nkey)", err)
		}
		// The URL and the client's error may quote a password or token.
		return nil, redact.Error(fmt.Errorf("connect to %s: %w", g.server, err), g.server)
	}
	// With Trust the store passes a newer-schema record without a valid
	// message proof as untrusted rather than as newer (a forged one stops
	// no read) and follow leaves out records without a valid proof.
	st, err := journal.OpenExisting(ctx, nc, journal.Config{StreamName: g.stream, SubjectPrefix: g.prefix, Trust: g.trust})
	if err != nil {
		nc.Close()
		return nil, refused(nc, err)
	}
	return &natsSource{nc: nc, st: st, untrusted: map[uint64]string{}}, nil
}

// refused explains an error that followed a permissions violation: the
// identity may not make that request.
func refused(nc *nats.Conn, err error) error {
	if perm := journal.PermissionError(nc); perm != nil {
		return fmt.Errorf("%v: the server refused the request for this identity (%v); ayatori-journal needs the journal's read-only identity", err, perm)
	}
	return err
}

type natsSource struct {
	nc        *nats.Conn
	st        *journal.Store
	untrusted map[uint64]string
}

// uid and all keep the records the store reports untrusted (checkTrust
// flags them again, with why, and verify reports them) and stop at a
// newer-schema record the manager wrote: this build can not tell what it
// says.
func (n *natsSource) uid(ctx context.Context, uid string) ([]journal.Record, error) {
	var recs []journal.Record
	err := n.st.Scan(ctx, journal.ScanOptions{UID: uid}, func(r journal.Record, err error) error {
		if errors.Is(err, journal.ErrNewerSchema) {
			return err
		}
		if n.keep(r, err) {
			recs = append(recs, r)
		}
		return nil
	})
	return recs, refused(n.nc, err)
}

// keep reports whether a record Scan delivered is kept (decoded, trusted
// or not), noting an untrusted one's verdict.
func (n *natsSource) keep(r journal.Record, err error) bool {
	if errors.Is(err, journal.ErrUntrusted) {
		n.untrusted[r.Sequence] = err.Error()
		return true
	}
	return err == nil
}

func (n *natsSource) verdicts() map[uint64]string { return n.untrusted }

func (n *natsSource) all(ctx context.Context, since *time.Time) ([]journal.Record, []uint64, error) {
	var recs []journal.Record
	var bad []uint64
	err := n.st.Scan(ctx, journal.ScanOptions{Since: since}, func(r journal.Record, err error) error {
		switch {
		case errors.Is(err, journal.ErrNewerSchema):
			return err
		case n.keep(r, err):
			recs = append(recs, r)
		default:
			bad = append(bad, r.Sequence)
		}
		return nil
	})
	return recs, bad, refused(n.nc, err)
}

func (n *natsSource) follow(ctx context.Context, uid string, after uint64, fn func(journal.Record, error)) error {
	return refused(n.nc, n.st.Follow(ctx, uid, after, fn))
}

func (n *natsSource) close() { n.nc.Close() }

// exportLine is one NDJSON line: a record, or a marker for an undecodable
// stream message (invalid=true with its sequence). Untrusted is why the
// exporting read found the record without a valid proof of origin (with
// --trusted-keys): an export keeps neither a record's subject nor its
// message proof, so a read of the file takes the note over (it can only
// take trust away, never give it).
type exportLine struct {
	journal.Record
	Invalid   bool   `json:"invalid,omitempty"`
	Untrusted string `json:"untrusted,omitempty"`
}

type fileSource struct {
	recs      []journal.Record
	bad       []uint64
	untrusted map[uint64]string
}

// openFile reads an export. A record of a newer schema version stops the
// read, or, with trusted (--trusted-keys), is kept for checkTrust to flag:
// an export keeps no message proof, so nothing in a file can attribute it.
func openFile(path string, trusted bool) (*fileSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fs := &fileSource{untrusted: map[uint64]string{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l exportLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s:%d: not an exported record: %v", path, line, err)
		}
		if l.Sequence == 0 {
			// export writes the stream sequence on every line, invalid
			// records included: without one this is not an export.
			return nil, fmt.Errorf("%s:%d: not an exported record (no \"seq\"; write the file with `ayatori-journal export`)", path, line)
		}
		if l.Invalid {
			fs.bad = append(fs.bad, l.Sequence)
			continue
		}
		if l.Untrusted != "" {
			fs.untrusted[l.Sequence] = l.Untrusted
		}
		if err := l.Record.Validate(); err != nil {
			switch {
			case errors.Is(err, journal.ErrNewerSchema) && trusted:
				fs.recs = append(fs.recs, l.Record)
			case errors.Is(err, journal.ErrNewerSchema):
				return nil, fmt.Errorf("%s:%d: %w", path, line, err)
			default:
				fs.bad = append(fs.bad, l.Sequence)
			}
			continue
		}
		fs.recs = append(fs.recs, l.Record)
	}
	return fs, sc.Err()
}

func (f *fileSource) uid(_ context.Context, uid string) ([]journal.Record, error) {
	var out []journal.Record
	for _, r := range f.recs {
		if r.Object.UID == uid {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fileSource) all(_ context.Context, since *time.Time) ([]journal.Record, []uint64, error) {
	if since == nil {
		return f.recs, f.bad, nil
	}
	var out []journal.Record
	for _, r := range f.recs {
		if !r.Time.Before(*since) {
			out = append(out, r)
		}
	}
	return out, f.bad, nil
}

func (f *fileSource) follow(context.Context, string, uint64, func(journal.Record, error)) error {
	return errors.New("--follow needs a live server, not --from-file")
}

func (f *fileSource) verdicts() map[uint64]string { return f.untrusted }

func (f *fileSource) close() {}

// objectSelector picks one object by UID or by kind/namespace/name.
type objectSelector struct {
	uid, kind, namespace, name string
	uidSet                     func() bool // --uid was given (even empty)
	// showsOlder: the command prints the older objects with the same name
	// itself (timeline); otherwise resolve notes them on stderr.
	showsOlder bool
}

// selectorUse is the argument part of the Use line of a command that
// selects one object.
const selectorUse = "[UID | --kind KIND [NAMESPACE/]NAME]"

func (o *objectSelector) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.uid, "uid", "", "object UID (1-64 letters, digits or '-'; no NATS wildcards)")
	o.uidSet = func() bool { return cmd.Flags().Changed("uid") }
	cmd.Flags().StringVar(&o.kind, "kind", "", "object kind (with --name or a NAMESPACE/NAME argument), e.g. PostgreSQLTenant or Job; case-insensitive")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "", "object namespace (with --name; empty for cluster-scoped)")
	cmd.Flags().StringVar(&o.name, "name", "", "object name (with --kind)")
}

// positional applies the optional argument: with --kind it is the
// object's [NAMESPACE/]NAME, without it a UID.
func (o *objectSelector) positional(args []string) error {
	if len(args) == 0 {
		return nil
	}
	a := args[0]
	if o.kind == "" {
		if o.uid != "" || o.uidSet != nil && o.uidSet() {
			return errors.New("give the UID either as --uid or as the argument, not both")
		}
		o.uid = a
		return nil
	}
	if o.name != "" || o.namespace != "" {
		return errors.New("give the object either as [NAMESPACE/]NAME or with --name/--namespace, not both")
	}
	ns, name, ok := strings.Cut(a, "/")
	if !ok {
		ns, name = "", a
	}
	if name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("want [NAMESPACE/]NAME, got %q", a)
	}
	o.namespace, o.name = ns, name
	return nil
}

// validate rejects a --uid that is not a UID before anything is read: the
// UID is a token of the subjects read, so "*" or ">" would read every
// object's records as one, and an empty --uid would silently select the
// whole stream. --kind, --namespace and --name are compared with the
// records' fields, never put into a subject.
func (o *objectSelector) validate() error {
	if o.uid != "" || o.uidSet != nil && o.uidSet() {
		if err := journal.ValidateUID(o.uid); err != nil {
			return fmt.Errorf("--uid %w", err)
		}
	}
	return nil
}

// resolve returns the UID to show and the older objects with the same
// kind/namespace/name. By name, the most recently active UID of that
// kind/namespace/name wins (a recreated object has a new UID); the others
// are returned newest first, and noted on stderr unless the command shows
// them itself. With --trusted-keys only records with a valid proof of
// origin count: a forged record naming an object under another UID
// decides nothing.
func (o *objectSelector) resolve(ctx context.Context, g *globalOptions, src source, stderr io.Writer) (string, []journal.ObjectSummary, error) {
	if o.uid != "" {
		if o.name != "" || o.kind != "" {
			return "", nil, errors.New("give either --uid or --kind/--name, not both")
		}
		return o.uid, nil, nil
	}
	if o.name == "" || o.kind == "" {
		return "", nil, errors.New("select an object with --uid (or a UID argument), or with --kind and --name/--namespace (or a [NAMESPACE/]NAME argument)")
	}
	all, _, err := src.all(ctx, nil)
	if err != nil {
		return "", nil, err
	}
	recs := (&loaded{recs: all, untrusted: g.checkTrust(all, "", src.verdicts())}).named()
	var matches []journal.ObjectSummary
	for _, s := range journal.Summaries(recs) {
		if strings.EqualFold(s.Object.Kind, o.kind) && s.Object.Name == o.name && s.Object.Namespace == o.namespace {
			matches = append(matches, s)
		}
	}
	if len(matches) == 0 {
		hint := ""
		if o.namespace == "" {
			hint = " (namespaced kinds need --namespace/-n or NAMESPACE/NAME)"
		}
		return "", nil, &exitError{code: 3, msg: fmt.Sprintf("no records for %s %s in the journal%s", o.kind, strings.TrimPrefix(o.namespace+"/"+o.name, "/"), hint)}
	}
	if !o.showsOlder {
		for _, m := range matches[1:] {
			fmt.Fprintf(stderr, "note: older object with the same name: uid %s (first record %s, last record %s)\n", m.Object.UID,
				m.FirstTime.UTC().Format(time.RFC3339), m.LastTime.UTC().Format(time.RFC3339))
		}
	}
	return matches[0].Object.UID, matches[1:], nil
}

func parseTimeFlag(name, v string) (*time.Time, error) {
	if v == "" {
		return nil, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		t := time.Now().Add(-d)
		return &t, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, fmt.Errorf("--%s: want RFC 3339 time or a duration ago (e.g. 2h), got %q", name, v)
	}
	return &t, nil
}

func withTimeout(g *globalOptions) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), g.timeout)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// loaded is what a subcommand reads: one object's records, or the whole
// stream's (with the sequences of undecodable records).
type loaded struct {
	ctx  context.Context
	src  source
	uid  string // "" when the whole stream was read
	recs []journal.Record
	// older are the older objects with the selected kind/namespace/name
	// (selected by name only), newest first.
	older []journal.ObjectSummary
	bad   []uint64
	// untrusted are the records (by sequence) without a valid proof of
	// origin, with why; nil when --trusted-keys was not given.
	untrusted map[uint64]string
	stop      func()
}

// trusted returns the records with a valid proof of origin (all of them
// without --trusted-keys).
func (l *loaded) trusted() []journal.Record {
	if len(l.untrusted) == 0 {
		return l.recs
	}
	out := make([]journal.Record, 0, len(l.recs))
	for _, r := range l.recs {
		if _, bad := l.untrusted[r.Sequence]; !bad {
			out = append(out, r)
		}
	}
	return out
}

// named is trusted() without an executor's answers to messages it could
// not take as the manager's (journal.StrayAnswer: a refusal names the
// object the refused record claims, an undecodable one's answer
// Unknown/unknown), so those decide no name (resolve) and make no object
// or name one (list); verify reports each, timeline shows them.
func (l *loaded) named() []journal.Record {
	var out []journal.Record
	for _, r := range l.trusted() {
		if !journal.StrayAnswer(r) {
			out = append(out, r)
		}
	}
	return out
}

// warnUntrusted notes on w what trusted() left out, or that proofs were
// not checked.
func (l *loaded) warnUntrusted(w io.Writer) {
	if l.untrusted == nil {
		fmt.Fprintln(w, "note: proofs of origin not checked (no --trusted-keys)")
		return
	}
	if len(l.untrusted) > 0 {
		fmt.Fprintf(w, "warning: %s without a valid proof of origin left out (see `ayatori-journal verify`)\n", plural(len(l.untrusted), "record"))
	}
}

// checkTrust flags, with g.trust, every record without a valid proof of
// origin: those the source found (verdicts, by sequence), any whose proof
// does not verify, and in one UID's records any that names another object
// (a record copied onto this UID's subject).
func (g *globalOptions) checkTrust(recs []journal.Record, uid string, verdicts map[uint64]string) map[uint64]string {
	if g.trust == nil {
		return nil
	}
	out := map[uint64]string{}
	for i := range recs {
		r := &recs[i]
		if why, ok := verdicts[r.Sequence]; ok {
			out[r.Sequence] = why
		} else if r.SchemaVersion > journal.SchemaVersion {
			// A newer record read from an export: nothing in the file
			// can attribute it.
			out[r.Sequence] = fmt.Sprintf("%v: a record of schema version %d (this build reads 1..%d), read from an export, which keeps no message proof",
				journal.ErrUntrusted, r.SchemaVersion, journal.SchemaVersion)
		} else if err := g.trust.Verify(r); err != nil {
			out[r.Sequence] = err.Error()
		} else if uid != "" && r.Object.UID != uid {
			out[r.Sequence] = fmt.Sprintf("%v: the record names uid %s but is stored on the subject of %s", journal.ErrUntrusted, r.Object.UID, uid)
		}
	}
	return out
}

// close releases the source and the --timeout context.
func (l *loaded) close() {
	l.src.close()
	l.stop()
}

// load opens the source (bounded by --timeout) and reads the object sel
// (with the optional positional argument args) names, or, when sel names none and whole is true, every record since
// since. With requireRecords an object without records is exit status 3.
// The caller closes the result.
func (g *globalOptions) load(cmd *cobra.Command, args []string, sel *objectSelector, whole, requireRecords bool, since *time.Time) (*loaded, error) {
	if err := sel.positional(args); err != nil {
		return nil, err
	}
	if err := sel.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(g)
	src, err := g.open(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	l := &loaded{ctx: ctx, src: src, stop: cancel}
	if whole && sel.uid == "" && sel.name == "" {
		if l.recs, l.bad, err = src.all(ctx, since); err != nil {
			l.close()
			return nil, err
		}
		l.untrusted = g.checkTrust(l.recs, "", src.verdicts())
		return l, nil
	}
	if l.uid, l.older, err = sel.resolve(ctx, g, src, cmd.ErrOrStderr()); err == nil {
		l.recs, err = src.uid(ctx, l.uid)
	}
	if err == nil && requireRecords && len(l.recs) == 0 {
		err = &exitError{code: 3, msg: "no records for uid " + l.uid}
	}
	if err != nil {
		l.close()
		return nil, err
	}
	l.untrusted = g.checkTrust(l.recs, l.uid, src.verdicts())
	return l, nil
}
