package atstart

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// FitLimitRanges returns res (a container's requests and limits) moved just enough to satisfy the Container items
// of ranges, as the LimitRanger admission plugin checks them: each request and limit at least min, each limit at
// most max (a request at most its limit), and each limit at most maxLimitRequestRatio times its request (the
// request raised to fit). A resource a range names in min but res does not set is set to min. An error says which
// bound cannot be met (a min above a max, say); res is then of no use in that namespace.
func FitLimitRanges(res corev1.ResourceRequirements, ranges []corev1.LimitRange) (corev1.ResourceRequirements, error) {
	out := *res.DeepCopy()
	if out.Requests == nil {
		out.Requests = corev1.ResourceList{}
	}
	if out.Limits == nil {
		out.Limits = corev1.ResourceList{}
	}
	var items []corev1.LimitRangeItem
	for _, lr := range ranges {
		for _, it := range lr.Spec.Limits {
			if it.Type == corev1.LimitTypeContainer {
				items = append(items, it)
			}
		}
	}
	// Mins first, then maxes, then ratios, so that each step only moves a value towards what the next allows.
	for _, it := range items {
		for name, lo := range it.Min {
			if q, ok := out.Requests[name]; !ok || q.Cmp(lo) < 0 {
				out.Requests[name] = lo.DeepCopy()
			}
			if q, ok := out.Limits[name]; ok && q.Cmp(lo) < 0 {
				out.Limits[name] = lo.DeepCopy()
			}
		}
	}
	for _, it := range items {
		for name, hi := range it.Max {
			if q, ok := out.Limits[name]; !ok || q.Cmp(hi) > 0 {
				out.Limits[name] = hi.DeepCopy()
			}
			if q, ok := out.Requests[name]; ok && q.Cmp(out.Limits[name]) > 0 {
				out.Requests[name] = out.Limits[name].DeepCopy()
			}
		}
	}
	for _, it := range items {
		for name, ratio := range it.MaxLimitRequestRatio {
			lim, ok := out.Limits[name]
			if !ok {
				continue
			}
			r := ratio.AsApproximateFloat64()
			if r <= 0 {
				continue
			}
			need := int64(math.Ceil(float64(lim.MilliValue()) / r))
			if q, ok := out.Requests[name]; !ok || q.MilliValue() < need {
				out.Requests[name] = *resource.NewMilliQuantity(need, lim.Format)
			}
		}
	}
	if err := checkLimitRanges(out, items); err != nil {
		return res, err
	}
	return out, nil
}

// checkLimitRanges says which bound of items res breaks, or nil.
func checkLimitRanges(res corev1.ResourceRequirements, items []corev1.LimitRangeItem) error {
	var broken []string
	for _, it := range items {
		for _, name := range slices.Sorted(maps.Keys(it.Min)) {
			lo := it.Min[name]
			if q, ok := res.Requests[name]; !ok || q.Cmp(lo) < 0 {
				broken = append(broken, fmt.Sprintf("%s request below min %s", name, lo.String()))
			}
			if q, ok := res.Limits[name]; ok && q.Cmp(lo) < 0 {
				broken = append(broken, fmt.Sprintf("%s limit below min %s", name, lo.String()))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(it.Max)) {
			hi := it.Max[name]
			if q, ok := res.Limits[name]; !ok || q.Cmp(hi) > 0 {
				broken = append(broken, fmt.Sprintf("%s limit above max %s", name, hi.String()))
			}
			if q, ok := res.Requests[name]; ok && q.Cmp(hi) > 0 {
				broken = append(broken, fmt.Sprintf("%s request above max %s", name, hi.String()))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(it.MaxLimitRequestRatio)) {
			ratio := it.MaxLimitRequestRatio[name]
			lim, lok := res.Limits[name]
			req, rok := res.Requests[name]
			if lok && rok && req.MilliValue() > 0 && float64(lim.MilliValue())/float64(req.MilliValue()) > ratio.AsApproximateFloat64() {
				broken = append(broken, fmt.Sprintf("%s limit/request above ratio %s", name, ratio.String()))
			}
		}
	}
	if len(broken) > 0 {
		return fmt.Errorf("%s", strings.Join(broken, ", "))
	}
	return nil
}
