package operator

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// deliveries is how the agent reached an exporter's pods given it at start (atstart.Record.Delivery), for the
// Ready message: the webhook chooses per pod the first delivery the cluster admits (atstart.Checker), so a
// namespace that refuses image volumes shows InitContainer where --at-start-delivery says image-volume.
type deliveries struct {
	count map[atstart.Delivery]int
	// fellBack are the pods given another delivery than the configured one, and fallbackWhy what the webhook
	// said of the first of them (atstart.AnnotationNotes).
	fellBack    []string
	fallbackWhy string
}

// add counts pod's delivery; want is the configured one.
func (d *deliveries) add(pod *corev1.Pod, at atstart.Record, want atstart.Delivery) {
	got := at.Delivery
	if got == "" {
		got = atstart.DeliveryImageVolume
	}
	if d.count == nil {
		d.count = map[atstart.Delivery]int{}
	}
	d.count[got]++
	if want != "" && got != want {
		d.fellBack = append(d.fellBack, pod.Name)
		if d.fallbackWhy == "" {
			d.fallbackWhy = webhookNotes(pod)
		}
	}
}

// summary is the Ready message's part on the pods given the agent at start: how many, by which delivery, and the
// fallbacks with what the webhook said of one.
func (d *deliveries) summary(pods int, want atstart.Delivery) string {
	msg := fmt.Sprintf("%d pods given the agent at start", pods)
	var by []string
	for _, k := range slices.Sorted(maps.Keys(d.count)) {
		by = append(by, fmt.Sprintf("%s %d", k, d.count[k]))
	}
	if len(by) > 0 {
		msg += ", by " + strings.Join(by, " and ")
	}
	if len(d.fellBack) > 0 {
		slices.Sort(d.fellBack)
		msg += fmt.Sprintf("; the webhook fell back from %s (the cluster refuses it) in %s", want, limitList(d.fellBack, 5))
		if d.fallbackWhy != "" {
			msg += ": " + d.fallbackWhy
		}
	}
	return msg
}
