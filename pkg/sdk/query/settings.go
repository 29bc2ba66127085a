package query

import "k8s.io/apimachinery/pkg/labels"

// Settings is what a list of Options asks of a read. Implementations of
// Interface other than Reader, such as pkg/sdk/sdktest's, read the Options
// they are given through SettingsOf.
type Settings struct {
	// Live asks for a read from the source of truth, not from a cache.
	Live bool
	// Selector restricts List; nil means every object.
	Selector labels.Selector
	// Index and IndexValue restrict List to the objects a cache index
	// (sdk.WithIndex) files under IndexValue; Index "" means no index.
	Index, IndexValue string
	// Watch names the watch whose cache FromWatch reads; "" means none.
	Watch string
}

// SettingsOf applies opts in order and returns the result, or the error of
// an invalid option (such as a label selector that does not parse).
func SettingsOf(opts ...Option) (Settings, error) {
	o, err := collect(opts)
	if err != nil {
		return Settings{}, err
	}
	return Settings{Live: o.live, Selector: o.selector, Index: o.index, IndexValue: o.indexValue, Watch: o.watch}, nil
}
