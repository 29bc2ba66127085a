package sdktest_test

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
	"github.com/handlerkit/handlerkit/pkg/sdk/sdktest"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// cluster is started only by the tests that compare with a real API
// server; the in-memory tests and the examples need none.
var cluster = testenv.Shared{
	Setup: func(ctx context.Context, env *testenv.Environment) error {
		return env.InstallCRDs(ctx, gadgetCRD())
	},
}

func TestMain(m *testing.M) { os.Exit(cluster.Main(m)) }

const gadgetGroup = "sdktest.handlerkit.dev"

// gadgetCRD is a namespaced custom resource with a status subresource.
func gadgetCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets." + gadgetGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gadgetGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
}

// backend is one implementation of the interfaces under the contract,
// with namespaces of its own.
type backend struct {
	name string
	r    query.Interface
	w    action.Interface
	// ns and other are two namespaces no other test uses.
	ns, other string
}

// realBackend reads and writes a real API server through query.For and
// action.For. Nothing is watched, so every read goes to the server.
func realBackend(t *testing.T) backend {
	t.Helper()
	env := cluster.Get(t)
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "contract")
	if err != nil {
		t.Fatal(err)
	}
	other, err := env.CreateNamespace(ctx, "contract-other")
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	op, err := sdk.New(env.Config(), sdk.WithRegisterer(prometheus.NewRegistry()), sdk.WithMetricsAddr("0"), sdk.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	return backend{name: "apiserver", r: query.For(op), w: action.For(op), ns: ns, other: other}
}

// memoryBackend is a fresh sdktest.Client.
func memoryBackend(t *testing.T) backend {
	t.Helper()
	c, err := sdktest.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	return backend{name: "sdktest", r: c, w: c, ns: "contract-a1b2c", other: "contract-other-d3e4f"}
}
