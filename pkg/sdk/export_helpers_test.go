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
