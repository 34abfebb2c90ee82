package opensandbox

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"go.yaml.in/yaml/v3"
)

// The embedded copies must stay byte-identical to the pinned shared copy.
func TestEmbeddedSpecsMatchSharedCopy(t *testing.T) {
	shared := filepath.Join(integration.RepoRoot(), "..", "shared", "specs", "opensandbox")
	if _, err := os.Stat(shared); err != nil {
		t.Skipf("no shared spec copy at %s: %v", shared, err)
	}
	for _, name := range SpecFiles {
		want, err := os.ReadFile(filepath.Join(shared, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		got, err := SpecFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("embedded spec/%s differs from %s", name, filepath.Join(shared, name))
		}
	}
}

// The lenient rewrite turns every `nullable: true` into a type that admits
// null and leaves no `nullable` keyword behind.
func TestLenientNullable(t *testing.T) {
	for file, want := range map[string]int{"sandbox-lifecycle.yml": 3, "execd-api.yaml": 2} {
		raw, err := SpecFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(raw), "nullable: true"); n != want {
			t.Errorf("%s: %d nullable keywords upstream, want %d (a new pinned copy? re-check the rewrite)", file, n, want)
		}
		var before yaml.Node
		if err := yaml.Unmarshal(raw, &before); err != nil {
			t.Fatal(err)
		}
		fixed, err := lenientNullable(raw)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(fixed), "nullable") {
			t.Errorf("%s: nullable survived the rewrite", file)
		}
		var root yaml.Node
		if err := yaml.Unmarshal(fixed, &root); err != nil {
			t.Fatal(err)
		}
		if n, m := countNullTypes(&before), countNullTypes(&root); m-n != want {
			t.Errorf("%s: %d more types admit null after the rewrite, want %d", file, m-n, want)
		}
	}
	// A scalar type with an enum gains null in both.
	out, err := lenientNullable([]byte("a:\n  type: string\n  enum: [x]\n  nullable: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		A struct {
			Type []string
			Enum []any
		}
	}
	if err := yaml.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.A.Type) != 2 || v.A.Type[1] != "null" || len(v.A.Enum) != 2 || v.A.Enum[1] != nil {
		t.Errorf("rewrite = %s", out)
	}
	if _, err := lenientNullable([]byte("a:\n  $ref: '#/x'\n  nullable: true\n")); err == nil {
		t.Error("nullable without type: no error")
	}
}

func countNullTypes(n *yaml.Node) int {
	c := 0
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "type" && n.Content[i+1].Kind == yaml.SequenceNode {
				for _, e := range n.Content[i+1].Content {
					if e.Value == "null" {
						c++
					}
				}
			}
		}
	}
	for _, k := range n.Content {
		c += countNullTypes(k)
	}
	return c
}
