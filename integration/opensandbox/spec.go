package opensandbox

import (
	"bytes"
	"embed"
	"fmt"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"go.yaml.in/yaml/v3"
)

// specFS holds the pinned, unmodified OpenSandbox documents (see
// spec/PROVENANCE.md).
//
//go:embed spec/README.md spec/LICENSE spec/sandbox-lifecycle.yml spec/execd-api.yaml
var specFS embed.FS

// SpecFiles lists the embedded files, relative to spec/, that are byte-for-byte
// copies of the pinned upstream documents.
var SpecFiles = []string{"README.md", "LICENSE", "sandbox-lifecycle.yml", "execd-api.yaml"}

// SpecFile returns one embedded file of spec/ (one of SpecFiles), unmodified.
func SpecFile(name string) ([]byte, error) { return specFS.ReadFile("spec/" + name) }

// apiDoc is one loaded OpenAPI document with its validator.
type apiDoc struct {
	name      string
	validator validator.Validator
	model     *v3.Document
}

// schema returns the component schema with the given name.
func (d *apiDoc) schema(name string) (*base.Schema, error) {
	if d.model.Components == nil || d.model.Components.Schemas == nil {
		return nil, fmt.Errorf("%s: no component schemas", d.name)
	}
	proxy, ok := d.model.Components.Schemas.Get(name)
	if !ok || proxy == nil {
		return nil, fmt.Errorf("%s: no component schema %q", d.name, name)
	}
	s := proxy.Schema()
	if s == nil {
		return nil, fmt.Errorf("%s: component schema %q: %v", d.name, name, proxy.GetBuildError())
	}
	return s, nil
}

// loadDoc reads an embedded document, rewrites the OpenAPI 3.0 `nullable`
// keyword into its 3.1 form (see lenientNullable) and builds a validator.
func loadDoc(file string) (*apiDoc, error) {
	raw, err := SpecFile(file)
	if err != nil {
		return nil, err
	}
	fixed, err := lenientNullable(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	doc, err := libopenapi.NewDocument(fixed)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("%s: build model: %w", file, err)
	}
	v := validator.NewValidatorFromV3Model(&model.Model,
		// Authentication is the server's own behaviour (a 401 the spec
		// documents), not a schema violation of the client.
		config.WithoutSecurityValidation(),
	)
	return &apiDoc{name: file, validator: v, model: &model.Model}, nil
}

// lenientNullable rewrites every schema carrying the OpenAPI 3.0 keyword
// `nullable: true` next to `type: X` into the OpenAPI 3.1 / JSON Schema form
// `type: [X, "null"]` (adding null to an `enum` when there is one) and drops
// `nullable` (also `nullable: false`). The pinned documents are OpenAPI 3.1
// but use `nullable` in a few places; a strict 3.1 validator refuses the
// keyword. The rewrite is in memory only: the embedded files stay
// byte-identical to the upstream copies.
func lenientNullable(raw []byte) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, err
	}
	n, err := rewriteNullable(&root)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return raw, nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// rewriteNullable walks the tree and returns how many `nullable` keywords it
// rewrote.
func rewriteNullable(n *yaml.Node) (int, error) {
	count := 0
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value != "nullable" || v.Kind != yaml.ScalarNode || (v.Value != "true" && v.Value != "false") {
				continue
			}
			if v.Value == "true" {
				if err := addNullType(n); err != nil {
					return count, fmt.Errorf("line %d: %w", k.Line, err)
				}
			}
			n.Content = append(n.Content[:i], n.Content[i+2:]...)
			count++
			i -= 2
		}
	}
	for _, c := range n.Content {
		m, err := rewriteNullable(c)
		count += m
		if err != nil {
			return count, err
		}
	}
	return count, nil
}

func addNullType(m *yaml.Node) error {
	null := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "null", Style: yaml.DoubleQuotedStyle}
	typ, enum := -1, -1
	for i := 0; i+1 < len(m.Content); i += 2 {
		switch m.Content[i].Value {
		case "type":
			typ = i + 1
		case "enum":
			enum = i + 1
		}
	}
	if typ < 0 {
		return fmt.Errorf("nullable without type is not supported by the lenient rewrite")
	}
	t := m.Content[typ]
	switch t.Kind {
	case yaml.ScalarNode:
		m.Content[typ] = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle,
			Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: t.Value}, null}}
	case yaml.SequenceNode:
		has := false
		for _, c := range t.Content {
			has = has || c.Value == "null"
		}
		if !has {
			t.Content = append(t.Content, null)
		}
	default:
		return fmt.Errorf("unexpected type node kind %v", t.Kind)
	}
	if enum >= 0 && m.Content[enum].Kind == yaml.SequenceNode {
		e := m.Content[enum]
		has := false
		for _, c := range e.Content {
			has = has || (c.Tag == "!!null")
		}
		if !has {
			e.Content = append(e.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"})
		}
	}
	return nil
}
