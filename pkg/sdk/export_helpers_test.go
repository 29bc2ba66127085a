package sdk

import (
	"context"

	"github.com/sirupsen/logrus"
)

// WithLoggerContext returns ctx carrying l as LoggerFrom's logger, as a
// handling's context does.
func WithLoggerContext(ctx context.Context, l logrus.FieldLogger) context.Context {
	return withLogger(ctx, l)
}

// CachedForm returns what the cache of the watch named watchName holds
// for key in namespace, as the informer stores it (compact or decoded).
func CachedForm(o *Operator, watchName, namespace, key string) (any, bool) {
	set := o.informers.Load()
	if set == nil {
		return nil, false
	}
	idx, _, ok := set.cacheOfWatch(watchName, namespace)
	if !ok {
		return nil, false
	}
	obj, exists, err := idx.GetByKey(key)
	return obj, exists && err == nil
}
