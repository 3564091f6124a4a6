package controller

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// TestWorkloadChanged: a Deployment's update reconciles its Release when
// something the Setters and Deployers read changed, not when the
// Deployment controller only rewrote a condition's timestamps.
func TestWorkloadChanged(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	base := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-a", Generation: 3, Annotations: map[string]string{"a": "1"}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 4, ReadyReplicas: 3, AvailableReplicas: 3,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue,
				Reason: "ReplicaSetUpdated", LastUpdateTime: t0, LastTransitionTime: t0}}},
	}
	for _, tc := range []struct {
		name string
		edit func(d *appsv1.Deployment)
		want bool
	}{
		{"timestamps only", func(d *appsv1.Deployment) {
			d.Status.Conditions[0].LastUpdateTime = metav1.NewTime(t0.Add(time.Second))
		}, false},
		{"nothing", func(*appsv1.Deployment) {}, false},
		{"a pod ready", func(d *appsv1.Deployment) { d.Status.ReadyReplicas, d.Status.AvailableReplicas = 4, 4 }, true},
		{"spec", func(d *appsv1.Deployment) { d.Generation = 4 }, true},
		{"observed", func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 4 }, true},
		{"annotation", func(d *appsv1.Deployment) { d.Annotations["claim"] = "x" }, true},
		{"failing", func(d *appsv1.Deployment) {
			d.Status.Conditions[0].Status, d.Status.Conditions[0].Reason = corev1.ConditionFalse, "ProgressDeadlineExceeded"
		}, true},
		{"terminating", func(d *appsv1.Deployment) { d.Status.TerminatingReplicas = new(int32(1)) }, true},
	} {
		next := base.DeepCopy()
		tc.edit(next)
		if got := workloadChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: next}); got != tc.want {
			t.Errorf("%s: reconcile %v, want %v", tc.name, got, tc.want)
		}
	}
}
