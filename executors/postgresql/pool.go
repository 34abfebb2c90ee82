package postgresql

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// Credentials are the admin role's effective user name and password, read
// from the admin Secret. They live only in memory.
type Credentials struct {
	Username string
	Password string
}

// Target is everything that identifies one admin connection: the Instance
// UID, the endpoint, the credential reference and the effective credentials.
type Target struct {
	InstanceUID string
	Endpoint    dbcontract.Endpoint
	CredRef     dbcontract.AdminCredentialRef
	Creds       Credentials
}

// identity is a digest of the target, kept in memory only. The Secret's
// resourceVersion is deliberately not part of it: a metadata-only change of
// the Secret does not reconnect.
func (t Target) identity() string {
	h := sha256.New()
	for _, s := range []string{t.InstanceUID, t.Endpoint.Host, t.Endpoint.HostAddr, strconv.Itoa(int(t.Endpoint.Port)),
		t.Endpoint.Database, t.Endpoint.SSLMode, t.CredRef.SecretName, t.CredRef.UsernameKey, t.CredRef.PasswordKey,
		t.Creds.Username, t.Creds.Password} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TLSConfig builds the client TLS configuration for an sslmode, following
// libpq's semantics without any fallback (no implicit downgrade):
//   - disable: no TLS;
//   - require: TLS, certificate not verified;
//   - verify-ca: chain verified against the CA bundle, host name not checked;
//   - verify-full: chain and host name (DNS SAN of host, or IP SAN when the
//     server name is an IP address) verified.
func TLSConfig(sslMode, serverName string, roots *x509.CertPool) (*tls.Config, error) {
	switch sslMode {
	case "disable":
		return nil, nil
	case "require":
		return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, nil //nolint:gosec // libpq "require" semantics, explicit in the spec
	case "verify-ca", "verify-full":
		if roots == nil {
			return nil, errors.New("sslMode " + sslMode + " needs a CA bundle (--postgresql-ca-bundle-path)")
		}
		if sslMode == "verify-full" {
			return &tls.Config{ServerName: serverName, RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
		}
		return &tls.Config{
			InsecureSkipVerify: true, //nolint:gosec // chain verified below, host name intentionally not (verify-ca)
			MinVersion:         tls.VersionTLS12,
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				certs := make([]*x509.Certificate, len(raw))
				for i, r := range raw {
					c, err := x509.ParseCertificate(r)
					if err != nil {
						return err
					}
					certs[i] = c
				}
				if len(certs) == 0 {
					return errors.New("no server certificate")
				}
				inter := x509.NewCertPool()
				for _, c := range certs[1:] {
					inter.AddCert(c)
				}
				_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
				return err
			},
		}, nil
	default:
		return nil, fmt.Errorf("unknown sslMode %q", sslMode)
	}
}

// LoadCABundle reads a PEM trust bundle (no private keys accepted).
func LoadCABundle(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", path)
	}
	return pool, nil
}

// AdminSearchPath is the search_path of every admin session, sent in the
// startup packet so that no database- or role-level setting overrides it.
// Only pg_catalog resolves unqualified names, and temporary objects come
// last (the pattern PostgreSQL documents for SECURITY DEFINER functions);
// every statement of this executor also names pg_catalog objects in full.
const AdminSearchPath = "pg_catalog, pg_temp"

// ApplicationName is the application_name of every session Ayatori opens.
const ApplicationName = "ayatori-manager"

// TenantLogin is the Tenant role's own login: the role, its password (from
// OpenBao, in memory only) and the Tenant database. Statements that must
// run inside a Tenant database run over this login, never over the admin
// role's (docs/decisions/0003-no-admin-session-in-tenant-databases.md).
type TenantLogin struct {
	Role     string
	Password string
	Database string
}

// ConnConfig returns the config of an admin connection: the Instance's
// admin database and admin credentials, search_path AdminSearchPath. It
// connects to hostaddr (when set) while verifying the certificate against
// host, as libpq does with both host and hostaddr; viaIP connects to
// hostaddr and verifies the IP SAN instead. Nothing is taken from the
// process environment (PG* variables) or from files.
func ConnConfig(t Target, roots *x509.CertPool, viaIP bool, connectTimeout time.Duration) (*pgx.ConnConfig, error) {
	return connConfig(t.Endpoint, t.Endpoint.Database, t.Creds.Username, t.Creds.Password,
		map[string]string{"application_name": ApplicationName, "search_path": AdminSearchPath}, roots, viaIP, connectTimeout)
}

// TenantConnConfig returns the config of a connection as the Tenant role
// to its own database, with the Instance's endpoint and TLS settings. The
// session gets the Tenant's own database and role settings (it holds no
// more rights than the Tenant). It refuses the admin user name, so an admin
// session can not be opened inside a Tenant database through it.
func TenantConnConfig(t Target, login TenantLogin, roots *x509.CertPool, viaIP bool, connectTimeout time.Duration) (*pgx.ConnConfig, error) {
	if login.Role == "" || login.Database == "" {
		return nil, errors.New("a Tenant login needs a role and a database")
	}
	if login.Role == t.Creds.Username {
		return nil, fmt.Errorf("refusing to log in to Tenant database %q as the admin role", login.Database)
	}
	return connConfig(t.Endpoint, login.Database, login.Role, login.Password,
		map[string]string{"application_name": ApplicationName}, roots, viaIP, connectTimeout)
}

// connConfig builds a pgx config from the arguments alone. pgx.ParseConfig
// is the only constructor pgx accepts and it always merges the PG*
// environment; so it is given every setting it would otherwise read from
// the environment or from a file (service, passfile, TLS files are then
// never consulted), and every field of the result that those settings feed
// is set again here.
func connConfig(ep dbcontract.Endpoint, database, user, password string, params map[string]string, roots *x509.CertPool, viaIP bool, connectTimeout time.Duration) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(pinnedConnString)
	if err != nil {
		return nil, err
	}
	serverName := ep.Host
	if viaIP {
		serverName = ep.HostAddr
	}
	cfg.Host = serverName
	cfg.Port = uint16(ep.Port)
	cfg.Database = database
	cfg.User = user
	cfg.Password = password
	cfg.ConnectTimeout = connectTimeout
	dialer := &net.Dialer{KeepAlive: 5 * time.Minute, Timeout: connectTimeout}
	cfg.DialFunc = dialer.DialContext
	cfg.LookupFunc = net.DefaultResolver.LookupHost
	cfg.Fallbacks = nil
	cfg.ValidateConnect = nil
	cfg.AfterConnect = nil
	cfg.KerberosSrvName, cfg.KerberosSpn = "", ""
	cfg.RuntimeParams = params
	tlsCfg, err := TLSConfig(ep.SSLMode, serverName, roots)
	if err != nil {
		return nil, err
	}
	cfg.TLSConfig = tlsCfg
	// A password goes only to a server that proves it knows it: SCRAM-SHA-256
	// is the only method accepted (a server asking for cleartext, md5 or
	// nothing is refused before anything is sent), and over TLS the
	// exchange must be bound to the channel (SCRAM-SHA-256-PLUS,
	// tls-server-end-point), so a man in the middle with another
	// certificate can not relay it.
	cfg.RequireAuth = "scram-sha-256"
	cfg.ChannelBinding = "disable"
	if tlsCfg != nil {
		cfg.ChannelBinding = "require"
	}
	if ep.HostAddr != "" {
		addr := ep.HostAddr
		cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{addr}, nil }
	}
	return cfg, nil
}

// pinnedConnString names every setting pgx would otherwise take from a PG*
// environment variable (pgconn's parseEnvSettings) with a neutral value, so
// the manager's environment never reaches a connection. The values that
// matter (host, port, database, user, password, TLS, runtime parameters)
// are overwritten by connConfig. A PGSERVICE in the environment would still
// make pgx read a service file; the manager clears PG* variables at start
// (ClearLibpqEnvironment).
const pinnedConnString = "host=127.0.0.1 port=5432 dbname=postgres user=ayatori password=unused passfile=/dev/null " +
	"sslmode=disable sslcertmode=disable sslsni=0 sslkey='' sslcert='' sslrootcert='' sslpassword=unused " +
	"sslnegotiation=postgres application_name=ayatori-manager connect_timeout=10 target_session_attrs=any options='' timezone='' " +
	"min_protocol_version=3.0 max_protocol_version=3.0 channel_binding=prefer require_auth=scram-sha-256"

// LibpqEnvironment lists the environment variables libpq and pgx read
// (PG*), in this process's environment: names only, never values.
func LibpqEnvironment() []string {
	var names []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "PG") {
			names = append(names, name)
		}
	}
	return names
}

// ClearLibpqEnvironment removes every PG* variable from this process's
// environment and returns their names (for one log line at start). The
// manager connects only as its Instances say; a PGSERVICE, PGOPTIONS or
// PGTARGETSESSIONATTRS meant for psql must not change its sessions.
func ClearLibpqEnvironment() []string {
	names := LibpqEnvironment()
	for _, n := range names {
		_ = os.Unsetenv(n)
	}
	return names
}

// Pools holds one pgxpool per Instance, keyed by Instance UID. A change of
// the target identity (endpoint, credential reference or effective
// credentials) closes the old pool and opens a new one.
type Pools struct {
	roots          *x509.CertPool
	maxConns       int32
	connectTimeout time.Duration

	mu    sync.Mutex
	pools map[string]*poolEntry
	opens uint64
}

type poolEntry struct {
	identity string
	pool     *pgxpool.Pool
	// generation increases every time a new pool is opened for the UID.
	generation uint64
}

// NewPools creates the pool registry. maxConns bounds connections per
// Instance (the scale benchmark checks connections stay bounded by it).
func NewPools(roots *x509.CertPool, maxConns int32, connectTimeout time.Duration) *Pools {
	if maxConns <= 0 {
		maxConns = 4
	}
	if connectTimeout <= 0 {
		connectTimeout = 10 * time.Second
	}
	return &Pools{roots: roots, maxConns: maxConns, connectTimeout: connectTimeout, pools: map[string]*poolEntry{}}
}

// Get returns the pool for the target, replacing it when the identity changed.
func (p *Pools) Get(t Target) (*pgxpool.Pool, error) {
	id := t.identity()
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.pools[t.InstanceUID]; ok {
		if e.identity == id {
			return e.pool, nil
		}
		e.pool.Close()
		delete(p.pools, t.InstanceUID)
	}
	cc, err := ConnConfig(t, p.roots, false, p.connectTimeout)
	if err != nil {
		return nil, &dbcontract.Failure{Reason: dbcontract.ReasonInvalidSpec, Message: err.Error()}
	}
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	pc.ConnConfig = cc
	pc.MaxConns = p.maxConns
	pc.MinConns = 0
	pc.MaxConnIdleTime = 5 * time.Minute
	pc.HealthCheckPeriod = 30 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, err
	}
	p.opens++
	p.pools[t.InstanceUID] = &poolEntry{identity: id, pool: pool, generation: p.opens}
	return pool, nil
}

// Generation returns a number that changes whenever a new pool is opened
// for the Instance (0: no pool). Tests assert reconnect / no-reconnect with it.
func (p *Pools) Generation(instanceUID string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.pools[instanceUID]; ok {
		return e.generation
	}
	return 0
}

// Stat returns the pool statistics of an Instance (nil: no pool).
func (p *Pools) Stat(instanceUID string) *pgxpool.Stat {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.pools[instanceUID]; ok {
		return e.pool.Stat()
	}
	return nil
}

// Close closes the pool of one Instance.
func (p *Pools) Close(instanceUID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.pools[instanceUID]; ok {
		e.pool.Close()
		delete(p.pools, instanceUID)
	}
}

// CloseAll closes every pool.
func (p *Pools) CloseAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for uid, e := range p.pools {
		e.pool.Close()
		delete(p.pools, uid)
	}
}

// Connect opens a single admin connection to the Instance's admin
// database (not pooled), e.g. to prove the certificate covers hostaddr (viaIP).
func (p *Pools) Connect(ctx context.Context, t Target, viaIP bool) (*pgx.Conn, error) {
	cc, err := ConnConfig(t, p.roots, viaIP, p.connectTimeout)
	if err != nil {
		return nil, &dbcontract.Failure{Reason: dbcontract.ReasonInvalidSpec, Message: err.Error()}
	}
	return pgx.ConnectConfig(ctx, cc)
}

// ConnectTenant opens a single connection as the Tenant role to its own
// database (see TenantConnConfig).
func (p *Pools) ConnectTenant(ctx context.Context, t Target, login TenantLogin, viaIP bool) (*pgx.Conn, error) {
	cc, err := TenantConnConfig(t, login, p.roots, viaIP, p.connectTimeout)
	if err != nil {
		return nil, &dbcontract.Failure{Reason: dbcontract.ReasonInvalidSpec, Message: err.Error()}
	}
	return pgx.ConnectConfig(ctx, cc)
}
