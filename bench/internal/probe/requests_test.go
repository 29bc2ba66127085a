package probe

import "testing"

func TestClassifyTellsLiveReadsFromListsWatchesAndWrites(t *testing.T) {
	for _, c := range []struct {
		method, path, watch, want string
	}{
		{"GET", "/api/v1/namespaces/ns/configmaps/settings", "", ClassGet},
		{"GET", "/apis/jmx.handlerkit.dev/v1alpha1/namespaces/ns/prometheusjmxexporters/pje-00001", "", ClassGet},
		{"GET", "/api/v1/namespaces/ns", "", ClassGet},
		{"GET", "/api/v1/namespaces/ns/pods", "", ClassList},
		{"GET", "/apis/jmx.handlerkit.dev/v1alpha1/prometheusjmxexporters", "", ClassList},
		{"GET", "/api/v1/namespaces/ns/pods", "true", ClassWatch},
		{"GET", "/api/v1/watch/namespaces/ns/pods", "", ClassWatch},
		{"PUT", "/apis/jmx.handlerkit.dev/v1alpha1/namespaces/ns/prometheusjmxexporters/pje-00001/status", "", ClassWrite},
		{"PATCH", "/api/v1/namespaces/ns/pods/p", "", ClassWrite},
		{"GET", "/api", "", ClassDiscovery},
		{"GET", "/apis/jmx.handlerkit.dev/v1alpha1", "", ClassDiscovery},
		{"GET", "/version", "", ClassDiscovery},
	} {
		if got := Classify(c.method, c.path, c.watch); got != c.want {
			t.Errorf("Classify(%s %s watch=%q) = %s, want %s", c.method, c.path, c.watch, got, c.want)
		}
	}
}
