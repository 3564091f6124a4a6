package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

// Release moves a service between two Deployments behind an HTTPRoute,
// one revision at a time: changing spec.revision starts a rollout from the
// revision running now to the new one, with the strategy of spec.strategy.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rel
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.spec.revision`
// +kubebuilder:printcolumn:name="Stable",type=string,JSONPath=`.status.rollout.stableRevision`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.rollout.phase`
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.status.rollout.observed.weight`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Release struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ReleaseSpec   `json:"spec,omitempty"`
	Status ReleaseStatus `json:"status,omitempty"`
}

// ReleaseSpec is what the user asks for.
type ReleaseSpec struct {
	// Revision is the revision to run. The first one is the revision side
	// A's Deployment runs when the Release is created; every later one is
	// deployed by the operator on the idle side and rolled out.
	// +kubebuilder:validation:MinLength=1
	Revision string `json:"revision"`

	// Image is the image of a revision.
	Image ImageTemplate `json:"image"`

	// Strategy is how a new revision is rolled out.
	Strategy ReleaseStrategy `json:"strategy"`

	// Replicas is the replica count of a side at 100 percent capacity.
	// +kubebuilder:validation:Minimum=1
	Replicas int32 `json:"replicas"`

	// A and B are the two sides the revisions alternate between.
	A Side `json:"a"`
	B Side `json:"b"`

	// Route is the HTTPRoute, in the Release's namespace, whose weights
	// move traffic between the two sides' Services.
	Route RouteRef `json:"route"`

	// Control steers the current rollout: paused holds it while true;
	// abort, retry, promote, promoteFull and resume are one-shot requests
	// that act once each time they are set to a new value (a timestamp,
	// say), also across restarts of the operator (the rollout's state
	// records the last value of each it has seen).
	// +optional
	Control strategy.Control `json:"control,omitempty"`

	// Analysis judges the canary from Prometheus' metrics: its checks are
	// the rollout's health while the canary has traffic (failing, the
	// rollout aborts as the strategy's unhealthyThreshold says), and its
	// gates answer the canary's gate steps. Every gate step must name one
	// of its gates: a Release whose steps name another is refused
	// (Degraded, InvalidSpec). Without it the health is not measured and
	// a gate step is refused.
	// +optional
	// +kubebuilder:validation:XValidation:rule="has(self.prometheus)",message="the operator reads the metrics from Prometheus: set prometheus.address",reason="FieldValueRequired"
	Analysis *analysis.Spec `json:"analysis,omitempty"`
}

// ImageTemplate maps a revision to a container image.
type ImageTemplate struct {
	// Container is the name of the container whose image is set.
	// +kubebuilder:validation:MinLength=1
	Container string `json:"container"`
	// Template is the image with {revision} where the revision goes, e.g.
	// registry.example/shop:{revision}.
	// +kubebuilder:validation:Pattern=`\{revision\}`
	Template string `json:"template"`
}

// Side is one of the two sides: a Deployment and the Service in front of
// it, as the route names it.
type Side struct {
	// Deployment is the name of the side's Deployment.
	// +kubebuilder:validation:MinLength=1
	Deployment string `json:"deployment"`
	// Service is the name of the Service the route sends the side's
	// traffic to (a backendRef of the route).
	// +kubebuilder:validation:MinLength=1
	Service string `json:"service"`
	// Port is the backendRef's port; 0 when the route names none.
	// +optional
	Port int32 `json:"port,omitempty"`
}

// RouteRef names an HTTPRoute in the Release's namespace.
type RouteRef struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// SettleDelay is waited after the gateway reports the route's weights
	// accepted, before they count as applied.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must not be negative"
	SettleDelay *metav1.Duration `json:"settleDelay,omitempty"`
}

// ReleaseStrategy holds exactly one strategy.
//
// +kubebuilder:validation:XValidation:rule="(has(self.incremental) ? 1 : 0) + (has(self.canary) ? 1 : 0) + (has(self.blueGreen) ? 1 : 0) == 1",message="set exactly one of incremental, canary and blueGreen"
type ReleaseStrategy struct {
	// +optional
	Incremental *strategy.Incremental `json:"incremental,omitempty"`
	// +optional
	Canary *strategy.Canary `json:"canary,omitempty"`
	// +optional
	BlueGreen *strategy.BlueGreen `json:"blueGreen,omitempty"`
}

// Get returns the strategy that is set, nil for none.
func (s *ReleaseStrategy) Get() strategy.Strategy {
	switch {
	case s.Incremental != nil:
		return *s.Incremental
	case s.Canary != nil:
		return *s.Canary
	case s.BlueGreen != nil:
		return *s.BlueGreen
	}
	return nil
}

// ConditionReleased is True when the stable side runs spec.revision with
// all traffic and nothing is left to do: `kubectl wait
// --for=condition=Released release/NAME` waits for an upgrade to finish.
const ConditionReleased = "Released"

// ReleaseStatus is what the operator reports.
type ReleaseStatus struct {
	// ObservedGeneration is the generation of the spec the status
	// reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions are the rollout's conditions (Progressing, Paused,
	// Degraded, Available) and Released, each with the observedGeneration
	// of the spec it reflects, for kubectl wait.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Rollout is the whole state of the current (or last) rollout: the
	// operator resumes from it after a restart. Its revisions are
	// revision identities (see Revisions), not bare spec.revision values.
	// +optional
	Rollout strategy.State `json:"rollout,omitempty"`
	// Revisions records what each revision identity that the rollout
	// names (its stable, canary and pending revisions) and the spec's own
	// mean: the container and the image they run. A side is recognised as
	// running an identity by that image, so the stable side still runs
	// the stable revision after spec.image.template changes.
	// +optional
	// +listType=map
	// +listMapKey=identity
	Revisions []RevisionImage `json:"revisions,omitempty"`
}

// RevisionImage is what one revision identity means.
type RevisionImage struct {
	// Identity is spec.revision, "@", and the first 8 hexadecimal digits
	// of the SHA-256 of the pod template it renders (the container and its
	// image; serve/replicas.Identity), e.g. "v2@18fcb157": editing
	// spec.image.template changes it, and rolls the new image out as a
	// new revision.
	// +kubebuilder:validation:MinLength=1
	Identity string `json:"identity"`
	// Container is the name of the container whose image is set.
	Container string `json:"container"`
	// Image is the image the identity runs.
	Image string `json:"image"`
}

// ReleaseList is a list of Releases.
//
// +kubebuilder:object:root=true
type ReleaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Release `json:"items"`
}
