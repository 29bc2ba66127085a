package io.prometheus.metrics.config;

import java.util.HashMap;
import java.util.Map;

/**
 * PrometheusPropertiesLoader replaces the Prometheus client library's class of the same name inside the agent's
 * jar (the shade plugin relocates both, and the pom leaves the library's copy out).
 *
 * <p>The library's loader reads {@code prometheus.properties} from the class path, the file named by
 * {@code -Dprometheus.config} or {@code PROMETHEUS_CONFIG}, and {@code io.prometheus.*} system properties, and it
 * runs from {@link PrometheusProperties}' static initializer: inside someone else's JVM it would read the
 * application's settings, and a missing file named by {@code -Dprometheus.config} would fail every metric the agent
 * builds with {@code ExceptionInInitializerError}. This loader reads nothing: every setting is the library's
 * default, or comes from the map given to {@link #load(Map)}.
 */
public class PrometheusPropertiesLoader {

    /** PrometheusPropertiesLoader is not instantiated. */
    private PrometheusPropertiesLoader() {}

    /**
     * Returns the library's defaults; the application's properties, files and environment are never read.
     *
     * @return the default properties
     */
    public static PrometheusProperties load() {
        return load(new HashMap<Object, Object>());
    }

    /**
     * Returns properties built from the given map only, with the library's own parsing and validation.
     *
     * @param properties property names (as in {@code prometheus.properties}) and values
     * @return the properties
     */
    public static PrometheusProperties load(Map<Object, Object> properties) {
        PropertySource source = new PropertySource(new HashMap<Object, Object>(properties));
        return new PrometheusProperties(
                MetricsProperties.load("io.prometheus.metrics", source),
                new PrometheusProperties.MetricPropertiesMap(),
                ExemplarsProperties.load(source),
                ExporterProperties.load(source),
                ExporterFilterProperties.load(source),
                ExporterHttpServerProperties.load(source),
                ExporterPushgatewayProperties.load(source),
                ExporterOpenTelemetryProperties.load(source),
                OpenMetrics2Properties.load(source));
    }
}
