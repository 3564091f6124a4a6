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
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.step`
// +kubebuilder:printcolumn:name="A",type=string,JSONPath=`.status.a.revision`
// +kubebuilder:printcolumn:name="A-Weight",type=integer,JSONPath=`.status.a.weight`
// +kubebuilder:printcolumn:name="B",type=string,JSONPath=`.status.b.revision`
// +kubebuilder:printcolumn:name="B-Weight",type=integer,JSONPath=`.status.b.weight`
// +kubebuilder:printcolumn:name="Released",type=string,JSONPath=`.status.conditions[?(@.type=="Released")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,priority=1,JSONPath=`.status.message`
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
	// Mirror is how a canary's setMirror steps copy requests: empty, the
	// Gateway API's RequestMirror filter (Extended conformance; only on
	// gateways whose GatewayClass lists HTTPRouteRequestMirror and
	// HTTPRouteRequestPercentageMirror), or TraefikService, a Traefik
	// TraefikService the operator owns (implementation-specific).
	// +optional
	// +kubebuilder:validation:Enum="";TraefikService
	Mirror string `json:"mirror,omitempty"`
}

// ReleaseStrategy holds exactly one strategy.
//
// +kubebuilder:validation:XValidation:rule="(has(self.incremental) ? 1 : 0) + (has(self.canary) ? 1 : 0) + (has(self.blueGreen) ? 1 : 0) == 1",message="set exactly one of incremental, canary and blueGreen"
type ReleaseStrategy struct {
	// Raises the canary weight by at most stepPercent once per interval,
	// capacity moving ahead of traffic by up to maxSurgePercent.
	// +optional
	Incremental *strategy.Incremental `json:"incremental,omitempty"`
	// Walks the steps in order (setWeight, pause, gate), then promotes to
	// weight 100.
	// +optional
	Canary *strategy.Canary `json:"canary,omitempty"`
	// Provisions the whole canary next to the stable side, moves all
	// traffic in one hop, then scales the stable side down.
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
	// The generation of the spec the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// The rollout's conditions (Progressing, Paused, Degraded, Available,
	// and RollbackInProgress while a change of spec.revision walks the
	// rollout back; removed once that is cancelled or ends) and Released,
	// each with the observedGeneration of the spec it reflects, for
	// kubectl wait.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// The whole state of the current (or last) rollout (upshift's
	// strategy.State): the operator resumes from it after a restart. Its
	// revisions are revision identities (see revisions), not bare
	// spec.revision values.
	// +optional
	Rollout strategy.State `json:"rollout,omitempty"`
	// What each revision identity that the rollout names (its stable,
	// canary and pending revisions) and the spec's own mean: the container and the image they run. A side is recognised as
	// running an identity by that image, so the stable side still runs
	// the stable revision after spec.image.template changes.
	// +optional
	// +listType=map
	// +listMapKey=identity
	Revisions []RevisionImage `json:"revisions,omitempty"`

	// phase, step, a, b and message say where the rollout stands, for
	// people and kubectl get's columns; the operator sets them with the
	// rest of the status, from rollout.

	// The rollout's phase (rollout.phase), or Idle when no rollout runs
	// and Adopting before the operator has observed the sides and the
	// route.
	// +optional
	Phase string `json:"phase,omitempty"`
	// What the rollout does now: for a canary, the current step
	// of spec.strategy.canary.steps as "2/5 pause until resumed" (or
	// "setWeight 25", "pause 30s", "gate smoke"); for the other
	// strategies, the weight it walks to ("to weight 40"); ", paused
	// (reason)" is added while a pause other than a pause step holds it
	// (a Pause command, spec.control.paused, an unhealthy canary, an
	// inconclusive gate). While suspended, the step it stood at and the
	// weight a resume walks back up to ("2/5 pause until resumed,
	// suspended (resume continues from weight 25)"). Empty when no
	// rollout runs.
	// +optional
	Step string `json:"step,omitempty"`
	// What side A (spec.a) is observed running and the share of the
	// traffic it gets; absent until the operator has observed it.
	// +optional
	A *SideStatus `json:"a,omitempty"`
	// What side B (spec.b) is observed running and the share of the
	// traffic it gets.
	// +optional
	B *SideStatus `json:"b,omitempty"`
	// What the rollout waits for (rollout.message), else the Released
	// condition's message.
	// +optional
	Message string `json:"message,omitempty"`
}

// SideStatus is what one side runs and the traffic it gets.
type SideStatus struct {
	// The revision identity the side is observed running; empty when it
	// runs none the operator recognises.
	// +optional
	Revision string `json:"revision,omitempty"`
	// The side's share of the traffic in percent, as the route is
	// observed to hold it.
	Weight int32 `json:"weight"`
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
