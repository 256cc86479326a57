/*
 * libxml2 and libxslt report diagnostics through printf-style callbacks
 * (xmlGenericErrorFunc). Stable Rust cannot define a C variadic function, so
 * this shim formats the message and hands the finished text, together with
 * the format string (used to tell xsl:message output from error context
 * lines), to the Rust sink. It never writes to stdout or stderr.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void busbar_libxml_sink(void *ctx, const char *format, const char *text);

void busbar_libxml_generic_error(void *ctx, const char *format, ...) {
    char small[1024];
    va_list ap;
    int needed;

    if (format == NULL)
        return;
    va_start(ap, format);
    needed = vsnprintf(small, sizeof small, format, ap);
    va_end(ap);
    if (needed < 0)
        return;
    if ((size_t) needed < sizeof small) {
        busbar_libxml_sink(ctx, format, small);
        return;
    }
    {
        char *large = malloc((size_t) needed + 1);
        if (large == NULL) {
            /* Out of memory: the truncated text is still better than nothing. */
            busbar_libxml_sink(ctx, format, small);
            return;
        }
        va_start(ap, format);
        vsnprintf(large, (size_t) needed + 1, format, ap);
        va_end(ap);
        busbar_libxml_sink(ctx, format, large);
        free(large);
    }
}
