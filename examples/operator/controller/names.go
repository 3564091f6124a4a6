package controller

import (
	"strings"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
)

// The operator's names derive from its API group and kind
// (v1alpha1.Group, v1alpha1.Kind), so that a copy renamed to its own group
// and kind names everything after them: the organization is the label of
// the group before its top-level domain ("upshift" in
// operator.upshift.dev, "acme" in ship.acme.example).
var (
	// Name is "<organization>-<kind>-operator", upshift-release-operator:
	// the ClusterRole that generate.sh writes to config/rbac/role.yaml
	// (computed there by the same rule from the generated CRD), the
	// leader-election Lease and the source of the operator's Events.
	Name = organization(v1alpha1.Group) + "-" + strings.ToLower(v1alpha1.Kind) + "-operator"
	// MetricsPrefix is "<organization>_<kind>", upshift_release: the
	// metrics are upshift_release_phase, upshift_release_weight_percent,
	// and so on.
	MetricsPrefix = strings.ReplaceAll(organization(v1alpha1.Group), "-", "_") + "_" + strings.ToLower(v1alpha1.Kind)
)

// organization returns the label of group before its top-level domain,
// group itself when it has a single label.
func organization(group string) string {
	if i := strings.LastIndexByte(group, '.'); i >= 0 {
		group = group[:i]
	}
	if i := strings.LastIndexByte(group, '.'); i >= 0 {
		group = group[i+1:]
	}
	return group
}
