package controller

import (
	"bytes"
	"os"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

func TestOrganization(t *testing.T) {
	for group, want := range map[string]string{
		"ship.acme.example":      "acme",
		"batch.corp.example.org": "example",
		"acme.example":           "acme",
		"example":                "example",
		"my-org.io":              "my-org",
	} {
		if got := organization(group); got != want {
			t.Errorf("organization(%q) = %q, want %q", group, got, want)
		}
	}
}

// TestRoleName: generate.sh names the ClusterRole by the rule Name follows.
func TestRoleName(t *testing.T) {
	raw, err := os.ReadFile("../config/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(bytes.TrimPrefix(raw, []byte("---\n")), &role); err != nil {
		t.Fatal(err)
	}
	if role.Name != Name {
		t.Errorf("config/rbac/role.yaml names the ClusterRole %q, want Name %q: run generate.sh", role.Name, Name)
	}
}
