async fn report(name: impl Display) -> impl Display {
    let __dlock_key: ::std::string::String = ::std::format!("report:{}", name);
    let __dlock_acquired = ::dlock::__private::acquire(
            ::dlock::__private::global_client_for(
                ::core::concat!(::core::module_path!(), "::", "report"),
            ),
            ::dlock::__private::Kind::Reentrant,
            "report:<name>",
            __dlock_key,
            ::core::option::Option::None,
            ::core::option::Option::None,
        )
        .await;
    let __dlock_guard = match __dlock_acquired {
        ::core::result::Result::Ok(__dlock_guard) => __dlock_guard,
        ::core::result::Result::Err(__dlock_error) => return busy(__dlock_error),
    };
    let __dlock_run = ::dlock::__private::run_cancelling(
            &__dlock_guard,
            async move { name.to_string() },
        )
        .await;
    ::dlock::__private::Guard::release(__dlock_guard).await;
    match __dlock_run {
        ::core::result::Result::Ok(__dlock_output) => __dlock_output,
        ::core::result::Result::Err(
            ::dlock::__private::Lost { error: __dlock_error, .. },
        ) => busy(__dlock_error),
    }
}
