async fn sell(&mut self, order: Order) -> AppResult<()> {
    #![allow(unused)]
    let __dlock_key: ::std::string::String = ::std::format!(
        "{{shop}}:{}:{}", self.id, order.user.0
    );
    let __dlock_acquired = ::dlock::__private::acquire(
            ::core::result::Result::Ok(
                ::dlock::__private::IntoClient::to_client(&(self.locks)),
            ),
            ::dlock::__private::Kind::Reentrant,
            "{shop}:<self.id>:<order.user.0>",
            __dlock_key,
            ::core::option::Option::Some(::core::time::Duration::new(0u64, 0u32)),
            ::core::option::Option::None,
        )
        .await;
    let __dlock_guard = match __dlock_acquired {
        ::core::result::Result::Ok(__dlock_guard) => __dlock_guard,
        ::core::result::Result::Err(__dlock_error) => {
            return ::dlock::__private::lock_failure(__dlock_error);
        }
    };
    let __dlock_run = ::dlock::__private::run_cancelling(
            &__dlock_guard,
            ::dlock::__private::typed_body::<
                AppResult<()>,
                _,
            >(async move {
                self.sold += 1;
                Ok(())
            }),
        )
        .await;
    ::dlock::__private::Guard::release(__dlock_guard).await;
    match __dlock_run {
        ::core::result::Result::Ok(__dlock_output) => __dlock_output,
        ::core::result::Result::Err(
            ::dlock::__private::Lost {
                output: ::core::option::Option::Some(
                    __dlock_output @ ::core::result::Result::Err(_),
                ),
                ..
            },
        ) => __dlock_output,
        ::core::result::Result::Err(
            ::dlock::__private::Lost { error: __dlock_error, .. },
        ) => ::dlock::__private::lock_failure(__dlock_error),
    }
}
