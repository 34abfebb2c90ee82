package database

import (
	"strings"
	"testing"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
)

func TestIdentifiers(t *testing.T) {
	long := strings.Repeat("a", 64)
	cases := []struct {
		name    string
		fn      func(string) error
		in      string
		wantErr string
	}{
		{"db ok", ValidateDatabaseName, "netbox_1", ""},
		{"db upper", ValidateDatabaseName, "NetBox", "must match"},
		{"db quote", ValidateDatabaseName, `a"b`, "must match"},
		{"db semicolon", ValidateDatabaseName, "a;drop", "must match"},
		{"db space", ValidateDatabaseName, "a b", "must match"},
		{"db leading digit", ValidateDatabaseName, "1abc", "must match"},
		{"db hyphen", ValidateDatabaseName, "a-b", "must match"},
		{"db 63", ValidateDatabaseName, long[:63], ""},
		{"db 64", ValidateDatabaseName, long, "longer than 63"},
		{"db empty", ValidateDatabaseName, "", "empty"},
		{"db nul", ValidateDatabaseName, "a\x00b", "NUL"},
		{"db postgres", ValidateDatabaseName, "postgres", "reserved"},
		{"db template0", ValidateDatabaseName, "template0", "reserved"},
		{"db template1", ValidateDatabaseName, "template1", "reserved"},
		{"role ok", ValidateRoleName, "netbox", ""},
		{"role pg_", ValidateRoleName, "pg_monitor", "reserved"},
		{"role postgres", ValidateRoleName, "postgres", "reserved"},
		{"role public", ValidateRoleName, "public", "reserved"},
		{"role upper", ValidateRoleName, "Admin", "must match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fn(tc.in)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func validInstanceSpec() databasev1alpha1.PostgreSQLInstanceSpec {
	return instanceSpecWithDefaults(databasev1alpha1.PostgreSQLInstanceSpec{
		Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "postgresql.home.arpa", HostAddr: "192.0.2.10"},
		AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "shared-postgresql-admin"},
	})
}

func TestValidateInstanceSpec(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*databasev1alpha1.PostgreSQLInstanceSpec)
		want   string
	}{
		{"valid", func(*databasev1alpha1.PostgreSQLInstanceSpec) {}, ""},
		{"ipv6 hostaddr", func(s *databasev1alpha1.PostgreSQLInstanceSpec) { s.Endpoint.HostAddr = "2001:db8::10" }, ""},
		{"two addresses", func(s *databasev1alpha1.PostgreSQLInstanceSpec) { s.Endpoint.HostAddr = "192.0.2.1,192.0.2.2" }, "hostaddr"},
		{"hostname as hostaddr", func(s *databasev1alpha1.PostgreSQLInstanceSpec) { s.Endpoint.HostAddr = "db.example" }, "hostaddr"},
		{"bad host", func(s *databasev1alpha1.PostgreSQLInstanceSpec) { s.Endpoint.Host = "Bad_Host" }, "endpoint.host"},
		{"port 0", func(s *databasev1alpha1.PostgreSQLInstanceSpec) { s.Endpoint.Port = -1 }, "endpoint.port"},
		{"port too big", func(s *databasev1alpha1.PostgreSQLInstanceSpec) { s.Endpoint.Port = 70000 }, "endpoint.port"},
		{"admin database", func(s *databasev1alpha1.PostgreSQLInstanceSpec) { s.Endpoint.Database = "Postgres" }, "endpoint.database"},
		{"ssl mode", func(s *databasev1alpha1.PostgreSQLInstanceSpec) { s.Endpoint.SSLMode = "prefer" }, "sslMode"},
		{"secret name", func(s *databasev1alpha1.PostgreSQLInstanceSpec) { s.AdminCredentialRef.Name = "bad/name" }, "adminCredentialRef.name"},
		{"same keys", func(s *databasev1alpha1.PostgreSQLInstanceSpec) { s.AdminCredentialRef.PasswordKey = "username" }, "must differ"},
		{"bad key", func(s *databasev1alpha1.PostgreSQLInstanceSpec) { s.AdminCredentialRef.PasswordKey = "pass word" }, "passwordKey"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := validInstanceSpec()
			tc.mutate(&s)
			errs := ValidateInstanceSpec(s)
			got := strings.Join(errs, "\n")
			if tc.want == "" && len(errs) > 0 {
				t.Fatalf("unexpected errors: %s", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("want an error about %q, got %q", tc.want, got)
			}
		})
	}
}
