package sun.misc;

import java.util.Iterator;
import java.util.ServiceLoader;

/**
 * Stand-in for the sun.misc.Service class that Java 9 removed: Synapse 2.1 finds its mediator
 * factories and serializers with Service.providers(Class). It is compiled by run.sh and patched
 * into jdk.unsupported (--patch-module), the module that still holds sun.misc.
 */
public final class Service<S> {
    private Service() {}

    /** The providers of {@code service} visible to the thread's context class loader. */
    public static <S> Iterator<S> providers(Class<S> service) {
        return providers(service, Thread.currentThread().getContextClassLoader());
    }

    /** The providers of {@code service} listed in META-INF/services of {@code loader}. */
    public static <S> Iterator<S> providers(Class<S> service, ClassLoader loader) {
        // A named module may look services up only when it declares their use; this class
        // lives in jdk.unsupported, so it declares it at run time (allowed for its own module).
        Service.class.getModule().addUses(service);
        return ServiceLoader.load(service, loader).iterator();
    }
}
