package sdk

import (
	"context"

	"github.com/sirupsen/logrus"
)

type loggerKey struct{}

// LoggerFrom returns the logger of the handling that ctx belongs to, with
// the watch, namespace, name and handling fields set, or the standard
// logrus logger outside a handling.
func LoggerFrom(ctx context.Context) logrus.FieldLogger {
	if l, ok := ctx.Value(loggerKey{}).(logrus.FieldLogger); ok {
		return l
	}
	return logrus.StandardLogger()
}

func withLogger(ctx context.Context, l logrus.FieldLogger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}
