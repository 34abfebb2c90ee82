package integration

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var statementMarker = regexp.MustCompile(`'ayatori-log-[0-9]{6}'`)

// The server log a test scans for statements (duplicate side effects,
// admin sessions) must hold every line the server wrote, under both
// providers. Statements run back to back for longer than the
// testcontainers log stream's 5 s reconnect period, and each must be
// found exactly once.
func TestPostgresLogHoldsEveryStatement(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx := context.Background()
	pg := StartPostgres(t, PostgresOptions{LogStatements: true})
	c, err := pgx.Connect(ctx, pg.SuperuserDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	n := 0
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); n++ {
		if _, err := c.Exec(ctx, fmt.Sprintf("SELECT 'ayatori-log-%06d'", n), pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
	}
	log, err := pg.ReadLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range statementMarker.FindAllString(string(log), -1) {
		seen[m]++
	}
	var missing []int
	for i := 0; i < n; i++ {
		if seen[fmt.Sprintf("'ayatori-log-%06d'", i)] != 1 {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d statements not found exactly once in the server log (first: %d)", len(missing), n, missing[0])
	}
	t.Logf("%d statements, each once in the server log", n)
}
