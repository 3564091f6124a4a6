package kubetest_test

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/kubetest"
)

// A test package calls kubetest.Main from its TestMain
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }
//
// and kubetest.Get from each test that needs the API server. This test runs
// code under the least privilege an operator would grant it.
func Example() {
	testRouterLeastPrivilege := func(t *testing.T) {
		env := kubetest.Get(t) // starts the control plane once per package
		ns := env.Namespace(t)

		// Arrange as the administrator.
		route := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
		if err := env.Client.Create(t.Context(), route); err != nil {
			t.Fatal(err)
		}

		// Act as a ServiceAccount allowed only get/update/patch on routes.
		sa := env.ServiceAccount(t, ns, "router")
		env.Grant(t, ns, sa.Subject, rbacv1.PolicyRule{
			APIGroups: []string{gatewayv1.GroupName},
			Resources: []string{"httproutes", "grpcroutes"},
			Verbs:     []string{"get", "update", "patch"},
		})
		_ = sa.Client  // controller-runtime client as the ServiceAccount
		_ = sa.Gateway // Gateway API typed clientset as the ServiceAccount
	}
	_ = testRouterLeastPrivilege
}
