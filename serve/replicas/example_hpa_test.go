package replicas_test

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
)

// exampleCluster holds two Deployments, web-a at 10 replicas and web-b at
// 0, each with its own HPA (2 to 20 replicas); the HPA of web-a desires 10.
func exampleCluster() kubernetes.Interface {
	side := func(name string, n int32) (*appsv1.Deployment, *autoscalingv2.HorizontalPodAutoscaler) {
		lo, desired := int32(2), n
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: appsv1.DeploymentSpec{Replicas: &n}},
			&autoscalingv2.HorizontalPodAutoscaler{
				ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
				Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: &lo, MaxReplicas: 20,
					ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name}},
				Status: autoscalingv2.HorizontalPodAutoscalerStatus{ObservedGeneration: new(int64), CurrentReplicas: n, DesiredReplicas: desired},
			}
	}
	da, ha := side("web-a", 10)
	db, hb := side("web-b", 0)
	return k8sfake.NewClientset(da, ha, db, hb)
}

// Each side's Setter follows its side's HorizontalPodAutoscaler: a
// capacity is a share of the count the HPAs desire, set through the HPA's
// bounds; capacity 0 scales the workload to 0 and puts the HPA's bounds
// back.
func ExampleAutoscale() {
	ctx := context.Background()
	cs := exampleCluster()
	a := replicas.ForDeployment(cs, replicas.Workload{Namespace: "shop", Name: "web-a", FullReplicas: 0})
	b := replicas.ForDeployment(cs, replicas.Workload{Namespace: "shop", Name: "web-b", FullReplicas: 0})
	if err := replicas.Autoscale(cs, a, b, replicas.AutoscaleConfig{}); err != nil {
		fmt.Println(err)
		return
	}
	show := func(name string) {
		h, _ := cs.AutoscalingV2().HorizontalPodAutoscalers("shop").Get(ctx, name, metav1.GetOptions{})
		d, _ := cs.AppsV1().Deployments("shop").Get(ctx, name, metav1.GetOptions{})
		fmt.Printf("%s: %d replicas, HPA bounds %d..%d, %s %s\n", name, *d.Spec.Replicas,
			*h.Spec.MinReplicas, h.Spec.MaxReplicas, replicas.BoundsAnnotation, h.Annotations[replicas.BoundsAnnotation])
	}
	// 30% of the 10 replicas web-a's HPA desires: 3 on web-b, which may
	// grow to 30% of its HPA's maximum for more load.
	if err := b.SetCapacity(ctx, rollout.CapacityRequest{Percent: 30}); err != nil {
		fmt.Println(err)
		return
	}
	show("web-b")
	// Lowered to 70%: web-a's HPA is held at 7, and scales it down.
	if err := a.SetCapacity(ctx, rollout.CapacityRequest{Percent: 70}); err != nil {
		fmt.Println(err)
		return
	}
	show("web-a")
	// At 0, the workload first, then the bounds go back.
	if err := b.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
		fmt.Println(err)
		return
	}
	show("web-b")
	// Output:
	// web-b: 3 replicas, HPA bounds 3..6, upshift.dev/hpa-bounds {"minReplicas":2,"maxReplicas":20}
	// web-a: 10 replicas, HPA bounds 7..7, upshift.dev/hpa-bounds {"minReplicas":2,"maxReplicas":20}
	// web-b: 0 replicas, HPA bounds 2..20, upshift.dev/hpa-bounds
}
