package leader

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// masterStatus is leader_election_master_status{name}, the name client-go's own leader election uses, so that
// existing dashboards and alerts keep working.
type masterStatus struct {
	gauge prometheus.Gauge
}

func newMasterStatus(r prometheus.Registerer, name string) (*masterStatus, error) {
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leader_election_master_status",
		Help: "1 while this replica leads the named election, 0 otherwise.",
	}, []string{"name"})
	if err := r.Register(vec); err != nil {
		// Two electors in one process may share a registry; they then share the vector, one series per name.
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("leader: register leader_election_master_status: %w", err)
		}
		existing, ok := are.ExistingCollector.(*prometheus.GaugeVec)
		if !ok {
			return nil, fmt.Errorf("leader: leader_election_master_status is already registered as %T", are.ExistingCollector)
		}
		vec = existing
	}
	g := vec.WithLabelValues(name)
	g.Set(0)
	return &masterStatus{gauge: g}, nil
}

func (m *masterStatus) set(leading bool) {
	if leading {
		m.gauge.Set(1)
		return
	}
	m.gauge.Set(0)
}
