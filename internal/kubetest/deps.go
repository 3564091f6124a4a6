package kubetest

// Placeholder so that go.mod keeps the harness dependencies while the
// harness is written.
import (
	_ "k8s.io/client-go/kubernetes"
	_ "sigs.k8s.io/controller-runtime/pkg/client"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/gateway-api/apis/v1"
	_ "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)
