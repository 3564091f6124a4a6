// Package v1alpha1 is the API of the CRD tests: a Rollout whose spec embeds
// each upshift strategy and whose status is a strategy.State, as an operator
// built on upshift would declare it. controller-gen generates its DeepCopy
// (zz_generated.deepcopy.go) and its CRD (../../testdata); .ci/crdcheck
// regenerates both and fails on a difference.
//
// +kubebuilder:object:generate=true
// +groupName=check.upshift.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// Rollout upgrades one service to Spec.Revision with one of the strategies.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type Rollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RolloutSpec    `json:"spec,omitempty"`
	Status strategy.State `json:"status,omitempty"`
}

// RolloutSpec names the revision to run and how to get there: at most one
// strategy (none: the operator's default).
//
// +kubebuilder:validation:XValidation:rule="(has(self.incremental) ? 1 : 0) + (has(self.canary) ? 1 : 0) + (has(self.blueGreen) ? 1 : 0) <= 1",message="at most one of incremental, canary and blueGreen may be set"
type RolloutSpec struct {
	// Revision is the revision the service should run.
	// +kubebuilder:validation:MinLength=1
	Revision string `json:"revision"`
	// +optional
	Incremental *strategy.Incremental `json:"incremental,omitempty"`
	// +optional
	Canary *strategy.Canary `json:"canary,omitempty"`
	// +optional
	BlueGreen *strategy.BlueGreen `json:"blueGreen,omitempty"`
	// Control steers the rollout declaratively (strategy.State.Control).
	// +optional
	Control strategy.Control `json:"control,omitempty"`
}

// RolloutList is a list of Rollouts.
//
// +kubebuilder:object:root=true
type RolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Rollout `json:"items"`
}
