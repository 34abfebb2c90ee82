package postgresql

import (
	"reflect"
	"testing"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// configFacts are the parts of a pgx config a connection's behaviour
// depends on (functions compared by presence).
func configFacts(t *testing.T, tenant bool) map[string]any {
	t.Helper()
	tgt := Target{InstanceUID: "u", Endpoint: dbcontract.Endpoint{Host: "db.example", HostAddr: "192.0.2.7", Port: 6543, Database: "admin", SSLMode: "require"},
		Creds: Credentials{Username: "ayatori_admin", Password: "pw"}}
	cfg, err := ConnConfig(tgt, nil, false, 0)
	if tenant {
		cfg, err = TenantConnConfig(tgt, TenantLogin{Role: "shop", Password: "tpw", Database: "shop"}, nil, false, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	return map[string]any{
		"host": cfg.Host, "port": cfg.Port, "database": cfg.Database, "user": cfg.User, "password": cfg.Password,
		"tls": cfg.TLSConfig != nil, "runtime": cfg.RuntimeParams, "fallbacks": len(cfg.Fallbacks),
		"validate": cfg.ValidateConnect != nil, "afterConnect": cfg.AfterConnect != nil,
		"kerberos": cfg.KerberosSrvName + cfg.KerberosSpn, "sslNegotiation": cfg.SSLNegotiation, "sslCertMode": cfg.SSLCertMode,
		"minProto": cfg.MinProtocolVersion, "maxProto": cfg.MaxProtocolVersion, "channelBinding": cfg.ChannelBinding, "requireAuth": cfg.RequireAuth,
	}
}

// TestConnConfigIgnoresEnvironment: PG* variables of the manager's process
// (PGTARGETSESSIONATTRS, PGOPTIONS, ...) never reach a connection config.
func TestConnConfigIgnoresEnvironment(t *testing.T) {
	for _, tenant := range []bool{false, true} {
		clean := configFacts(t, tenant)
		for k, v := range map[string]string{
			"PGHOST": "evil.example", "PGPORT": "1", "PGDATABASE": "evil", "PGUSER": "evil", "PGPASSWORD": "CANARY-env-pw",
			"PGPASSFILE": "/nonexistent", "PGAPPNAME": "evil", "PGCONNECT_TIMEOUT": "1", "PGSSLMODE": "verify-full",
			"PGSSLKEY": "/nonexistent", "PGSSLCERT": "/nonexistent", "PGSSLCERTMODE": "require", "PGSSLSNI": "1",
			"PGSSLROOTCERT": "/nonexistent", "PGSSLPASSWORD": "x", "PGSSLNEGOTIATION": "direct", "PGTARGETSESSIONATTRS": "read-only",
			"PGTZ": "Pacific/Chatham", "PGOPTIONS": "-c search_path=evil", "PGMINPROTOCOLVERSION": "3.2", "PGMAXPROTOCOLVERSION": "3.2",
			"PGCHANNELBINDING": "require", "PGREQUIREAUTH": "password",
		} {
			t.Setenv(k, v)
		}
		if got := configFacts(t, tenant); !reflect.DeepEqual(got, clean) {
			t.Fatalf("tenant=%v: the environment changed the config:\n got %v\nwant %v", tenant, got, clean)
		}
	}
}

func TestAdminSessionsPinSearchPath(t *testing.T) {
	f := configFacts(t, false)
	if rp := f["runtime"].(map[string]string); rp["search_path"] != AdminSearchPath || rp["application_name"] != ApplicationName {
		t.Fatalf("admin runtime params %v", rp)
	}
	if rp := configFacts(t, true)["runtime"].(map[string]string); rp["search_path"] != "" {
		t.Fatalf("tenant sessions must keep the tenant's own search_path, got %v", rp)
	}
}

func TestTenantConnConfigRefusesAdmin(t *testing.T) {
	tgt := Target{Endpoint: dbcontract.Endpoint{Host: "h", Port: 5432, Database: "postgres", SSLMode: "disable"}, Creds: Credentials{Username: "ayatori_admin"}}
	if _, err := TenantConnConfig(tgt, TenantLogin{Role: "ayatori_admin", Database: "shop"}, nil, false, 0); err == nil {
		t.Fatal("an admin login into a tenant database was allowed")
	}
}

func TestClearLibpqEnvironment(t *testing.T) {
	t.Setenv("PGSERVICE", "evil")
	t.Setenv("PGOPTIONS", "-c role=x")
	names := ClearLibpqEnvironment()
	if len(names) < 2 || len(LibpqEnvironment()) != 0 {
		t.Fatalf("cleared %v, left %v", names, LibpqEnvironment())
	}
}
