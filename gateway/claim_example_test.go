package gateway_test

import (
	"fmt"

	"github.com/upshift-dev/upshift/gateway"
)

// The claim annotation of a rule depends on its two backends, not on
// their order, and a backend with no namespace is in the route's: a GitOps
// tool ignores every annotation that starts with ClaimAnnotationPrefix.
func ExampleClaimAnnotation() {
	a := gateway.Backend{Name: "web-a", Port: 80}
	b := gateway.Backend{Name: "web-b", Port: 80}
	key := gateway.ClaimAnnotation("shop", a, b)
	fmt.Println(key == gateway.ClaimAnnotation("shop", b, a))
	b.Namespace = "shop"
	fmt.Println(key == gateway.ClaimAnnotation("shop", a, b))
	fmt.Println(len(key) == len(gateway.ClaimAnnotationPrefix)+16)
	// Output:
	// true
	// true
	// true
}
