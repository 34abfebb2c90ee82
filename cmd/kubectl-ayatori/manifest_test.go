package main

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKrewManifest: plugins/ayatori.yaml is a krew v1alpha2 Plugin named
// ayatori whose every platform installs this binary (bin kubectl-ayatori)
// from a release archive, and whose description names the commands this
// binary has.
func TestKrewManifest(t *testing.T) {
	b, err := os.ReadFile("../../plugins/ayatori.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "ayatori" ||
		!strings.HasPrefix(m.Spec.Version, "v") || m.Spec.ShortDescription == "" || len(m.Spec.Platforms) == 0 {
		t.Fatalf("manifest %+v", m)
	}
	for _, p := range m.Spec.Platforms {
		os, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		if p.Bin != "kubectl-ayatori" || len(p.SHA256) != 64 || !strings.HasSuffix(p.URI, "/"+m.Spec.Version+"/kubectl-ayatori_"+os+"_"+arch+".tar.gz") {
			t.Errorf("platform %s/%s: %+v", os, arch, p)
		}
	}
	root := newRootCommand(nil, nil)
	for _, c := range []string{"why", "timeline", "replay", "verify"} {
		if cmd, _, err := root.Find([]string{c}); err != nil || cmd.Name() != c {
			t.Errorf("no %s command", c)
		}
		if !strings.Contains(m.Spec.Description, c) {
			t.Errorf("the description does not name %s", c)
		}
	}
}
