package main_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestJudge: what checkMove finds wrong with a side's pods.
func TestJudge(t *testing.T) {
	pod := func(name, app, image string, ready, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		if deleting {
			p.DeletionTimestamp = new(metav1.Now())
		}
		return p
	}
	sel := labels.SelectorFromSet(labels.Set{"app": "web-b"})
	for _, tc := range []struct {
		name      string
		pods      []corev1.Pod
		wantReady int
		want      []string
	}{
		{"ready", []corev1.Pod{pod("b1", "web-b", "v2", true, false), pod("b2", "web-b", "v2", false, false)}, 1, nil},
		{"none ready", []corev1.Pod{pod("b1", "web-b", "v2", false, false)}, 0, []string{"no pod running v2 is ready"}},
		{"no pod", nil, 0, []string{"no pod running v2 is ready"}},
		{"an old pod ready", []corev1.Pod{pod("b1", "web-b", "v2", true, false), pod("b0", "web-b", "v1", true, false)}, 1,
			[]string{"pod b0 is ready running v1, the template v2"}},
		{"an old pod going", []corev1.Pod{pod("b1", "web-b", "v2", true, false), pod("b0", "web-b", "v1", true, true)}, 1, nil},
		{"only a going pod", []corev1.Pod{pod("b1", "web-b", "v2", true, true)}, 0, []string{"no pod running v2 is ready"}},
		{"another side's pod", []corev1.Pod{pod("a1", "web-a", "v1", true, false)}, 0, []string{"no pod running v2 is ready"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready, got := judge(tc.pods, sel, "v2")
			if ready != tc.wantReady {
				t.Errorf("%d ready, want %d", ready, tc.wantReady)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
