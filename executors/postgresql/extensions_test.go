package postgresql

import (
	"errors"
	"strings"
	"testing"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

func TestJudgeExtensions(t *testing.T) {
	avail := map[string]extensionInfo{
		"pg_trgm":       {installable: true},
		"citext":        {installable: true},
		"postgres_fdw":  {installable: false},
		"cube":          {installable: true},
		"earthdistance": {installable: true, requires: []string{"cube"}},
		"needs_fdw":     {installable: true, requires: []string{"postgres_fdw"}},
		"needs_ghost":   {installable: true, requires: []string{"ghost"}},
	}
	for _, tc := range []struct {
		requested []string
		want      []string // substrings of the InvalidSpec message; none: accepted
	}{
		{requested: []string{"pg_trgm", "citext"}},
		{requested: []string{"earthdistance"}},
		{requested: nil},
		{requested: []string{"postgres_fdw"}, want: []string{"only a superuser can install", "postgres_fdw"}},
		{requested: []string{"nope", "pg_trgm"}, want: []string{"not available on this Instance: nope"}},
		{requested: []string{"needs_fdw"}, want: []string{"postgres_fdw (required by needs_fdw)"}},
		{requested: []string{"needs_ghost"}, want: []string{"ghost (required by needs_ghost)"}},
		{requested: []string{"nope", "postgres_fdw"}, want: []string{"nope", "postgres_fdw"}},
	} {
		err := judgeExtensions(avail, tc.requested)
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%v: %v", tc.requested, err)
			}
			continue
		}
		var c *dbcontract.Failure
		if !errors.As(err, &c) || c.Reason != dbcontract.ReasonInvalidSpec {
			t.Errorf("%v: want InvalidSpec, got %v", tc.requested, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(c.Message, w) {
				t.Errorf("%v: message %q lacks %q", tc.requested, c.Message, w)
			}
		}
	}
}
