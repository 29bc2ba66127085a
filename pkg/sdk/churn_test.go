package sdk

import (
	"fmt"
	goruntime "runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestChurnedLabelValuesLeaveNoStateBehind(t *testing.T) {
	// Short label values (a hash, a revision, a timestamp) churn as objects
	// come and go. Once the objects that held them are dropped, caching
	// them must have left nothing behind: no table, no canonical copies.
	const rounds, perRound = 5, 20000
	si := &sharedInformer{gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap")}
	heap := func() uint64 {
		goruntime.GC()
		goruntime.GC()
		var m goruntime.MemStats
		goruntime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	churn := func(round int) {
		cached := make([]any, perRound)
		for i := range cached {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: "ns", Name: fmt.Sprintf("cm-%d", i), UID: types.UID(fmt.Sprintf("uid-%d-%d", round, i)),
				// Two objects hold each value, as two replicas would.
				Labels: map[string]string{"rev": fmt.Sprintf("%06d", round*perRound+i/2), "app": "web"},
			}}
			var err error
			if cached[i], err = si.transform(cm); err != nil {
				t.Fatal(err)
			}
		}
		goruntime.KeepAlive(cached)
	}
	churn(0) // warm up whatever is allocated once
	before := heap()
	for r := 1; r <= rounds; r++ {
		churn(r)
	}
	after := heap()
	values := uint64(rounds * perRound / 2)
	if after > before && (after-before)/values >= 8 {
		t.Errorf("after %d short label values were cached and dropped, the heap grew by %d bytes (%d per value); want nothing kept",
			values, after-before, (after-before)/values)
	}
}
